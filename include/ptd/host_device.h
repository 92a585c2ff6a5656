// HostDevice: the Device over plain host memory (aligned to
// kDeviceAlignment). The default where there is no GPU, and what most tests
// load onto. host_accessible() is true, so the loader reads files straight
// into its buffers; copies are memcpy and complete before they return.
//
// Fresh memory without the fault tax: an AllocateMany block of at least
// HostMemoryOptions::huge_min_bytes is an anonymous mapping aligned to
// 2 MiB. Where transparent huge pages are available ("always" or "madvise"
// in /sys/kernel/mm/transparent_hugepage/enabled) it asks for them
// (MADV_HUGEPAGE) and pre-faults the block (MADV_POPULATE_WRITE, Linux
// 5.14+; on older kernels one write per 2 MiB page), on several threads,
// so that the reads that follow copy into resident memory instead of
// taking a fault per page. Where THP is "never", the block keeps 4 KiB
// pages from malloc and is not pre-faulted (that would only move the
// faults).
//
// Thread-safety: every method may be called concurrently.
#ifndef PTD_HOST_DEVICE_H_
#define PTD_HOST_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ptd/device.h"

namespace ptd {

struct HostMemoryOptions {
  // AllocateMany blocks at least this large get the huge-page treatment.
  size_t huge_min_bytes = size_t{8} << 20;
  // Pre-fault huge-page blocks before returning them.
  bool populate = true;
  // Threads that pre-fault one block (the calling thread included).
  size_t populate_threads = 4;
};

// How the host backs large blocks on this machine.
enum class HugePageMode { kAlways, kMadvise, kNever, kUnknown };
// /sys/kernel/mm/transparent_hugepage/enabled, read once.
HugePageMode SystemHugePageMode();

class HostDevice final : public Device {
 public:
  explicit HostDevice(HostMemoryOptions options = {}) : options_(options) {}
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHost; }
  int index() const override { return 0; }
  std::string name() const override { return "host"; }
  bool host_accessible() const override { return true; }

  // ResourceExhausted when the allocation fails.
  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override;
  // One block for all of them (each buffer 256-byte aligned within it):
  // one malloc per load instead of one per storage. The buffers share the
  // block, which is freed when the last of them goes; stats() still count
  // one allocation per buffer.
  absl::StatusOr<std::vector<DeviceBuffer>> AllocateMany(
      absl::Span<const size_t> sizes) override;
  // Ordinary (pageable) host memory.
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override;
  // Synchronous memcpy; the ticket is already complete.
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src,
                                               size_t nbytes) override;
  absl::Status Wait(const CopyTicket& ticket) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) override;
  DeviceStats stats() const override;

 private:
  absl::StatusOr<DeviceBuffer> AllocateBlock(size_t nbytes, bool staging);
  // The block behind AllocateMany: malloc'd, or a huge-page mapping.
  std::shared_ptr<void> AllocateManyBlock(size_t total);

  HostMemoryOptions options_;

  // Shared with the deleters of outstanding blocks, which may outlive
  // nothing but must not touch a destroyed device: counters live here.
  struct Counters {
    std::atomic<uint64_t> allocations{0}, allocated_bytes{0}, live_allocations{0},
        live_bytes{0}, staging_allocations{0}, live_staging_bytes{0}, copies{0},
        copied_bytes{0}, next_ticket{0};
  };
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace ptd

#endif  // PTD_HOST_DEVICE_H_
