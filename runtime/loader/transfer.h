// The third stage of a load, private to ptd::loader: transfer. The plan of
// reads and the Transfer that carries it out (TransferStorages runs the
// stage).
//
// A plan is a list of reads in source order. A read is either one chunk of
// one storage, or one range of the source that covers several neighbouring
// small storages (and the padding between them), each a Piece that is copied
// out of the read buffer to its destination.
#ifndef PTD_RUNTIME_LOADER_TRANSFER_H_
#define PTD_RUNTIME_LOADER_TRANSFER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/device.h"
#include "ptd/loader.h"
#include "runtime/loader/place.h"
#include "runtime/loader/plan.h"
#include "runtime/loader/read_engine.h"
#include "runtime/loader/signed_load.h"
#include "runtime/loader/stage_options.h"

namespace ptd::internal {

// Bytes [src_offset, src_offset + nbytes) of a read go to storage `storage`
// at `dst_offset`.
struct Piece {
  uint32_t storage = 0;
  uint64_t dst_offset = 0;
  uint64_t src_offset = 0;
  uint64_t nbytes = 0;
};

struct ReadItem {
  // Located: `offset` is in ByteSource::Location space (ReadLocated). Else
  // it is an offset into the single piece's storage key (ReadAt), or, when
  // `packed`, the pieces are whole storages without a location, each read
  // by its key to its src_offset (StorageJob::packed_offset; staged only).
  bool located = false;
  bool packed = false;
  // Located, and of PlanAlignedReads: [offset, offset + nbytes) is whole
  // aligned blocks (its end may pass the end of the file), read at once.
  bool aligned = false;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint32_t first_piece = 0;
  uint32_t num_pieces = 0;
};

struct ReadPlan {
  std::vector<ReadItem> items;
  std::vector<Piece> pieces;
  uint64_t max_item_bytes = 0;
};

// Plans reads of `which` (indices into `storages`): located storages in
// source order, neighbours of at most `pack_limit` bytes each read together
// while the span stays within `max_read` and gaps within `max_gap`; others
// in chunks of `max_read`. Empty storages need no read.
ReadPlan PlanReads(const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which,
                   uint64_t max_read, uint64_t pack_limit, uint64_t max_gap);

// PlanReads for a read engine that wants `alignment` (ReadEngine): the
// located storages are covered by ranges of whole `alignment` blocks, each
// of at most `max_read` bytes (rounded down to a block multiple, one block
// at least), read at once; storages whose blocks touch or lie within
// `max_gap` of each other share ranges, so that no block is read twice.
// Each range's pieces are the parts of the storages inside it (a storage
// larger than a range is split across several). Storages without a
// location are planned as PlanReads plans them.
ReadPlan PlanAlignedReads(const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which,
                          uint64_t max_read, uint64_t max_gap, uint64_t alignment,
                          uint64_t unlocated_pack_limit);

// Carries out plans against one source, tracking progress, the first
// complete storage, statistics and the phase timings of the options.
class Transfer {
 public:
  using Clock = LoadClock;

  Transfer(const ByteSource& source, ReadEngine& engine, std::vector<StorageJob>* storages,
           const TransferOptions& options, Clock::time_point start, uint64_t total_bytes);

  // Destinations `device` made, host-accessible: reads straight into them,
  // packed reads too when their destinations lie back to back as in the
  // file, others through a per-thread buffer; `threads` workers, the caller
  // included. Each read's destinations go to device.PrepareWrite first, on
  // the reader's thread.
  // With a signature hasher (set_hasher) of a "shards" signature, a thread
  // takes all the items of one shard at a time (SplitPlanAt cuts them at
  // shard boundaries), so that each shard is hashed in order on one thread.
  absl::Status RunDirect(Device& device, const ReadPlan& plan);
  // Through a ring of staging buffers of `device` (see loader.h): `threads`
  // reader threads fill slots (ring_slots, or threads + 2 when 0) while the
  // calling thread copies each filled slot as one batch and waits on its
  // tickets before the slot is reused.
  absl::Status RunStaged(Device& device, const ReadPlan& plan);

  // Straight from the file into device memory through the read engine's
  // device reader (GPUDirect Storage: ReadEngine::gds()), `threads` at once:
  // each item's pieces, one read per run of pieces that lie as the file
  // does. When a read fails, the engine records the fallback and the items
  // not yet read go through the staging ring (RunStaged).
  absl::Status RunGds(Device& device, const ReadPlan& plan);

  // Records storages that are complete without a read (mapped from the
  // file: LoadOptions::map_file) as Complete records a read: the first
  // weight, and progress, whose callback may cancel.
  absl::Status CompleteMapped(absl::Span<const uint32_t> which);

  // The signed load's hasher, which the read engine feeds (RunDirect groups
  // its items by the hasher's streams).
  void set_hasher(SignedFileHasher* hasher) { hasher_ = hasher; }

  // Adds the reads, copies and bytes read, and the copy and wait time.
  void AddTo(LoadStats* stats, LoadTimings* timings) const;
  // Seconds from `start` until the first storage was complete, when one was.
  std::optional<double> first_complete_s() const;

 private:
  class StagedRun;  // One RunStaged (transfer_staged.cc).
  class Scratch;    // A reader's buffer in RunDirect (transfer.cc).

  // device.PrepareWrite over the item's destinations.
  absl::Status Prepare(Device& device, const ReadPlan& plan, const ReadItem& item);
  absl::Status Read(const ReadPlan& plan, const ReadItem& item, uint8_t* dst);
  // One item of RunDirect into its destinations: straight, or through
  // `scratch` and copied out.
  absl::Status ReadIntoDestinations(const ReadPlan& plan, const ReadItem& item, Scratch& scratch);
  // True when the item's pieces cover its bytes in order without gaps and
  // their destinations follow each other the same way from `first_dest`:
  // the item can be read straight into them.
  bool DestinationsFollowSource(const ReadPlan& plan, const ReadItem& item,
                                const uint8_t* first_dest) const;
  // Records now as when the first storage was complete, unless one was.
  void MarkFirstComplete();
  // Adds `bytes` to the progress and calls the callback; when it says stop
  // (or a reader already did), the Cancelled error, named by `name`.
  absl::Status AddProgress(uint64_t bytes,
                           absl::FunctionRef<absl::Status(const absl::Status&)> name);
  // Records the item's bytes as done; a Cancelled error when the progress
  // callback says stop.
  absl::Status Complete(const ReadPlan& plan, const ReadItem& item);
  // `cause` with the item's storage key(s) and the phase in front.
  absl::Status Fail(const ReadPlan& plan, const ReadItem& item, std::string_view phase,
                    const absl::Status& cause) const;

  const ByteSource& source_;
  ReadEngine& engine_;
  std::vector<StorageJob>& storages_;
  const TransferOptions& options_;
  Clock::time_point start_;
  uint64_t total_bytes_;
  std::unique_ptr<std::atomic<uint64_t>[]> remaining_;  // Per storage.

  std::mutex progress_mu_;
  uint64_t done_bytes_ = 0;  // Guarded by progress_mu_.
  std::atomic<bool> cancelled_{false};
  // Why the load was cancelled, naming the storage (guarded by
  // progress_mu_): every reader that finds the load cancelled returns it,
  // so whichever reports first, the error says where it stopped.
  absl::Status cancel_status_;
  std::atomic<int64_t> first_complete_ns_{-1};
  std::atomic<uint64_t> reads_{0}, bytes_read_{0}, copies_{0}, copy_calls_{0},
      bytes_via_scratch_{0};
  double copy_s_ = 0, wait_s_ = 0;  // Caller thread only.
  SignedFileHasher* hasher_ = nullptr;
};

// The transfer stage over what Place, MapFromFile and Allocate left: the
// storages complete without a read (file mappings) first, then the reads
// of the device's storages (straight into them on a host-accessible device,
// by GPUDirect Storage where the read engine has it, else through the
// staging ring) and of those in mapped host memory, at once when there are
// both (the mapped blocks after the first are allocated here, each while
// the one before is read: AllocateMappedBlock), then the host device's. Adds to `stats` and
// `timings` (read, copy, wait);
// `*first_complete_s` as Transfer::first_complete_s. On error, waits for
// copies in flight and names the storage and the phase.
absl::Status TransferStorages(const ByteSource& source, Device& device,
                              const TransferOptions& options, Transfer::Clock::time_point start,
                              uint64_t total_bytes, std::vector<StorageJob>* storages,
                              PlacedStorages* placed, LoadStats* stats, LoadTimings* timings,
                              std::optional<double>* first_complete_s,
                              SignedLoad* signed_load = nullptr);

// `plan` with every located item that spans a multiple of `step` cut there
// (its pieces with it), so that each item lies within one step; an aligned
// item is cut only where `alignment` divides the cut.
ReadPlan SplitPlanAt(const ReadPlan& plan, uint64_t step, uint64_t alignment);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_TRANSFER_H_
