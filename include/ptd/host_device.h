// HostDevice: the Device over plain host memory (Allocate aligns to
// kDeviceAlignment; AllocateMany packs its buffers at kHostAlignment, 64
// bytes, as PyTorch's CPU allocator aligns). The default where there is no
// GPU, and what most tests load onto. host_accessible() is true, so the
// loader reads files straight into its buffers; copies are memcpy and
// complete before they return.
//
// Fresh memory without the fault tax: an AllocateMany block of at least
// HostMemoryOptions::huge_min_bytes is an anonymous mapping aligned to
// 2 MiB. Its pages are pre-faulted (MADV_POPULATE_WRITE, Linux 5.14+; on
// older kernels one write per page) so that the reads that fill it copy
// into resident memory instead of taking a fault per 4 KiB page inside each
// read: by default range by range, as PrepareWrite is called just before
// each read (on the reader's thread, so the first weight does not wait for
// the whole block), or all at once before AllocateMany returns
// (Populate::kOnAllocate, on several threads). It is backed by transparent huge
// pages (MADV_HUGEPAGE) when HostMemoryOptions::huge_pages says so. kAuto
// asks for them where THP is on ("always"/"madvise"), where no hypervisor
// takes back free blocks of huge-page size (free page reporting at that
// order or below: a huge page would come from exactly that memory), and
// where a huge-page fault will not stall on compaction: the kernel never
// compacts synchronously for it (defrag "defer" or "never"), or the free
// lists hold at least twice the block's bytes in free blocks of huge-page
// order (/proc/buddyinfo, read at each allocation), which its faults take
// as they are.
//
// A load that hints its size before it verifies (PrepareAllocation) finds
// its block mapped and partly faulted in already: a thread of the device's
// own faults the block in page by page in address order while the
// verification runs, and stops when AllocateMany
// takes the block (the readers' PrepareWrite faults in the rest). That work
// is the load's anyway; it moves to a core the verification leaves idle.
// Only with Populate::kBeforeWrite, for a hint of at least huge_min_bytes
// and at most half the machine's available memory (MemAvailable).
//
// kAuto's rules come from measurements on this project's VMs (huge pages
// against 4 KiB pages, with and without free page reporting):
// bench/results/notes.md.
//
// Thread-safety: every method may be called concurrently.
#ifndef PTD_HOST_DEVICE_H_
#define PTD_HOST_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/device.h"

namespace ptd {

enum class HugePages {
  kAuto,  // Where THP is on and its faults do not compact synchronously.
  kOn,    // Whenever THP is on ("always" or "madvise").
  kOff,   // 4 KiB pages.
};

// When HostDevice pre-faults memory that is about to be written.
enum class Populate {
  kBeforeWrite,  // PrepareWrite pre-faults the range it is given.
  kOnAllocate,   // AllocateMany pre-faults a mapped block before returning
                 // it; PrepareWrite does nothing.
  kOff,          // Never: pages fault in as they are first written.
};

struct HostMemoryOptions {
  // AllocateMany blocks at least this large are mapped, 2 MiB-aligned;
  // smaller ones come from the heap.
  size_t huge_min_bytes = size_t{8} << 20;
  HugePages huge_pages = HugePages::kAuto;
  Populate populate = Populate::kBeforeWrite;
  // Threads that pre-fault one block for kOnAllocate (the calling thread
  // included).
  size_t populate_threads = 4;
};

// How the host backs large blocks on this machine.
enum class HugePageMode { kAlways, kMadvise, kNever, kUnknown };
// /sys/kernel/mm/transparent_hugepage/enabled, read once.
HugePageMode SystemHugePageMode();
// True when a huge-page fault may stall on direct compaction (defrag
// "always", "madvise" or "defer+madvise"; unknown counts as true).
bool HugePageFaultsMayCompact();
// Bytes free in blocks of a PMD-sized huge page or larger, over every zone
// (/proc/buddyinfo, read now); nullopt where it cannot be read.
std::optional<uint64_t> FreeHugePageBytes();
// MemAvailable from /proc/meminfo, in bytes: the memory that can be taken
// without swapping (read now); nullopt where it cannot be read.
std::optional<uint64_t> MemAvailableBytes();
// The order from which free blocks are reported to a hypervisor that takes
// their memory back (free page reporting, e.g. a virtio balloon; read once
// from /sys/module/page_reporting/parameters); nullopt where nothing
// reports or it cannot be read.
std::optional<int> FreePageReportingOrder();
// True where that reporting covers free blocks of a huge page (its order is
// at most the huge page's, or the huge page's cannot be read).
bool FreeHugePagesAreReported();
// Whether a block of `nbytes` mapped with `options` asks for huge pages
// here, now (kAuto looks at the free lists; see above).
bool UsesHugePages(const HostMemoryOptions& options, size_t nbytes);

class HostDevice final : public Device {
 public:
  explicit HostDevice(HostMemoryOptions options = {});
  ~HostDevice() override;
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHost; }
  int index() const override { return 0; }
  std::string name() const override { return std::string(DeviceKindName(kind())); }
  bool host_accessible() const override { return true; }
  size_t buffer_alignment() const override { return kHostAlignment; }

  // ResourceExhausted when the allocation fails.
  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override;
  // One block for all of them (each buffer at the next kHostAlignment
  // boundary within it; the block itself is kDeviceAlignment-aligned):
  // one malloc per load instead of one per storage. The buffers share the
  // block, which is freed when the last of them goes; stats() still count
  // one allocation per buffer.
  absl::StatusOr<std::vector<DeviceBuffer>> AllocateMany(absl::Span<const size_t> sizes) override;
  // Populate::kBeforeWrite: faults the range's pages in for writing
  // (MADV_POPULATE_WRITE); on a kernel without it, one write of 0 per page
  // that lies wholly inside the range (pages it shares with a neighbour are
  // left to fault in as the read writes them). ResourceExhausted (ENOMEM)
  // when the memory is not there.
  absl::Status PrepareWrite(void* p, size_t n) override;
  // Maps a block of `bytes` (rounded up to 2 MiB) as AllocateMany would and
  // starts faulting it in (see above); an earlier prepared block that no
  // AllocateMany took is unmapped. The next AllocateMany whose total fits
  // takes it (the rest is unmapped); one that does not unmaps it.
  void PrepareAllocation(uint64_t bytes) override;
  // Ordinary (pageable) host memory.
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override;
  // Synchronous memcpy; the ticket is already complete.
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t nbytes) override;
  absl::Status Wait(const CopyTicket& ticket) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) override;
  DeviceStats stats() const override;

 private:
  // A block of at least `nbytes`, counted as staging or as an allocation.
  absl::StatusOr<std::shared_ptr<void>> AllocateBlock(size_t nbytes, bool staging);
  // The block behind AllocateMany: malloc'd, or a huge-page mapping.
  std::shared_ptr<void> AllocateManyBlock(size_t total);
  // A 2 MiB-aligned mapping of `size` bytes (a multiple of 2 MiB), advised
  // as options_ say; null when mmap fails. `huge`: advised for huge pages.
  uint8_t* MapBlock(size_t size, bool* huge);
  // The block that AllocateMany takes when a hint readied one.
  struct Prepared;
  // The prepared block cut to `size` bytes (its faulting stopped), when it
  // holds that many; else null, and it is unmapped. Either way it is gone.
  std::shared_ptr<void> TakePrepared(size_t size);

  HostMemoryOptions options_;

  // Shared with the deleters of outstanding blocks, which may outlive
  // nothing but must not touch a destroyed device: counters live here.
  struct Counters {
    std::atomic<uint64_t> allocations{0}, allocated_bytes{0}, live_allocations{0}, live_bytes{0},
        staging_allocations{0}, live_staging_bytes{0}, copies{0}, copied_bytes{0},
        huge_page_bytes{0}, prepared_bytes{0}, next_ticket{0};
  };
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  std::mutex prepared_mu_;
  std::unique_ptr<Prepared> prepared_;  // Guarded by prepared_mu_.
  // The part of the last prepared block that AllocateMany took which its
  // thread had faulted in, [lo, hi); PrepareWrite need not fault it in
  // again. Cleared when that block goes (shared with its deleter).
  struct Resident {
    std::mutex mu;
    uintptr_t lo = 0, hi = 0;  // Guarded by mu.
  };
  std::shared_ptr<Resident> resident_ = std::make_shared<Resident>();
};

}  // namespace ptd

#endif  // PTD_HOST_DEVICE_H_
