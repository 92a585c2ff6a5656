// The read engines of a load (LoadOptions::io, IoMode), behind one seam:
// the transfer stage asks a ReadEngine for a byte range of the source into
// a destination, and never learns which engine served it. The engine
// chooses per range (kAuto: what the page cache holds of it), falls back
// when an engine refuses or fails (never silently: IoReport::fallbacks),
// and counts what each engine read.
//
// Direct reads want 4 KiB alignment (alignment()): the transfer stage plans
// aligned ranges for them (PlanAlignedReads), which cover every storage
// with whole blocks and read no block twice. A range into a destination
// that is not aligned goes through the calling thread's aligned buffer.
//
// Page cache hygiene: under kDirect (and kGds), a range that the engine
// reads buffered after all (a fallback) and that was not cached before is
// dropped from the cache after the read, so that the load leaves the cache
// as it found it. kBuffered and kAuto's buffered ranges keep the cache's
// usual behaviour.
//
// Thread-safety: Read and ReadUnlocated may be called concurrently.
#ifndef PTD_RUNTIME_LOADER_READ_ENGINE_H_
#define PTD_RUNTIME_LOADER_READ_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/device.h"
#include "ptd/loader.h"
#include "runtime/io/direct_file.h"
#include "runtime/signing/file_hasher.h"

namespace ptd::internal {

class ReadEngine {
 public:
  // The engines for `source` as `requested` asks, for a load to `device`.
  // Opens the direct engine (and, for kGds, or kAuto on a cold file, the
  // device's file reader: Device::OpenFileReader) and looks at the page
  // cache now: IoReport::cached_bytes is what it held when the load began.
  ReadEngine(const ByteSource& source, IoMode requested, Device& device);
  ~ReadEngine();

  // The reader straight into the device's memory (GPUDirect Storage in its
  // P2P mode), while it serves; null when it does not (never opened, cuFile
  // in compatibility mode, or failed).
  DeviceFileReader* gds() const {
    return gds_failed_.load(std::memory_order_relaxed) ? nullptr : gds_.get();
  }
  // Reads [offset, offset + n) of the file into device memory at dst
  // through gds(), counting the bytes. REQUIRES: gds() != nullptr.
  absl::Status ReadToDevice(uint64_t offset, void* dst, size_t n);
  // Records that the device reader failed with `why` (a fallback to the
  // direct engine, through the staging ring); gds() is null from now on.
  void GdsFailed(const absl::Status& why);

  // Whether the transfer stage should plan aligned reads (the direct engine
  // may serve some ranges), and their alignment.
  bool aligned() const { return direct_ != nullptr; }
  // Whether some reads may go direct (the direct engine is open and the
  // choice is not buffered); the transfer then keeps more reads in flight.
  bool may_read_direct() const { return direct_ != nullptr && choice_ != Choice::kBuffered; }
  // Records that `n` threads read while the direct engine could serve
  // (IoReport::direct_readers: the most of any call).
  void NoteDirectReaders(size_t n);
  static constexpr uint64_t kAlignment = DirectFile::kAlignment;

  // Reads [offset, offset + dst.size()) of the source's Locate space into
  // dst. When aligned(), dst may run past the end of the file (an aligned
  // range's last block): the bytes past it are left as they were. Errors
  // as ByteSource::ReadLocated (DataLoss when the file shrank).
  absl::Status Read(uint64_t offset, absl::Span<uint8_t> dst);
  // Counts a read through the source's keys (ByteSource::ReadAt, which is
  // always buffered).
  void CountUnlocated(uint64_t bytes) { buffered_.fetch_add(bytes, std::memory_order_relaxed); }

  // Every successful Read hands its bytes to `hasher` (a signed load's),
  // whose error fails the read. Set before the reads start.
  void set_hasher(SignedFileHasher* hasher) { hasher_ = hasher; }

  // The report of every read so far.
  IoReport Report() const;

 private:
  enum class Choice : uint8_t { kBuffered, kDirect, kPerRange };
  void AddFallback(IoMode from, IoMode to, std::string reason);
  // Choice::kPerRange: whether [offset, offset + len) was mostly cached
  // when the load began.
  bool WasWarm(uint64_t offset, uint64_t len) const;
  absl::Status ReadUnhashed(uint64_t offset, absl::Span<uint8_t> dst);
  absl::Status ReadBuffered(uint64_t offset, absl::Span<uint8_t> dst, bool drop_if_cold);
  // The direct read of an aligned range into dst (through the calling
  // thread's aligned buffer when dst is not aligned).
  absl::Status ReadDirect(uint64_t offset, absl::Span<uint8_t> dst);

  const ByteSource& source_;
  const FileSource* file_ = nullptr;  // Null: no engine but the source's own reads.
  IoMode requested_;
  Choice choice_ = Choice::kBuffered;
  std::unique_ptr<DirectFile> direct_;
  std::atomic<bool> direct_failed_{false};
  std::atomic<bool> used_direct_{false};
  std::atomic<size_t> direct_readers_{0};
  std::atomic<uint64_t> buffered_{0}, direct_bytes_{0}, gds_bytes_{0};
  std::unique_ptr<DeviceFileReader> gds_;
  std::atomic<bool> gds_failed_{false};
  std::string gds_mode_;

  mutable std::mutex mu_;
  std::vector<IoFallback> fallbacks_;  // Guarded by mu_.
  std::optional<uint64_t> cached_bytes_;
  // Choice::kPerRange: what the page cache held of each chunk_ bytes of
  // the file when the load began (1: at least half of it), so that the
  // choice is not swayed by the readahead of the load's own buffered reads.
  std::vector<uint8_t> warm_chunks_;
  uint64_t chunk_ = 0;
  std::string choice_text_;
  SignedFileHasher* hasher_ = nullptr;
};

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_READ_ENGINE_H_
