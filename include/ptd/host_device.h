// HostDevice: the Device over plain host memory (aligned to
// kDeviceAlignment). The default where there is no GPU, and what most tests
// load onto. host_accessible() is true, so the loader reads files straight
// into its buffers; copies are memcpy and complete before they return.
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

class HostDevice final : public Device {
 public:
  HostDevice() = default;
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
