// FaultDevice: a Device for tests that wraps another device, counts what is
// asked of it, and fails the Nth allocation, staging allocation, copy or wait
// with a chosen status.
//
// Test support: target ptd::testing (with AsyncDevice, ptd/testing/
// async_device.h), not part of ptd::device. Link it into tests only. It is
// installed with the package so that a program built on ptd can test its
// own handling of load failures (out of device memory, a failed copy or
// wait) and run the staging path without a GPU, over any Device, without
// writing a wrapper of the whole seam itself. Being test support, its API
// may change between minor versions.
//
// It can also pose as a device the host cannot address (host_accessible
// false) while using host memory underneath, so that the loader's staging
// path runs without a GPU; and it can defer copies until Wait() (as a real
// asynchronous copy may), so that a loader reusing a staging buffer before
// waiting on its ticket loads wrong bytes, which digests then catch.
// Without defer_copies, copies go straight to the wrapped device and stay
// as asynchronous as it makes them (CudaDevice, AsyncDevice): Wait() waits
// on the wrapped device's ticket.
//
// Example:
//   auto dev = std::make_shared<FaultDevice>(std::make_shared<HostDevice>(),
//       FaultPlan{.fail_copy = 3, .host_accessible = false});
//   auto w = LoadWeights(bundle, dev);   // Fails at the third copy.
//   dev->counts().peak_live_staging_bytes;
//
// Thread-safety: every method may be called concurrently.
#ifndef PTD_TESTING_FAULT_DEVICE_H_
#define PTD_TESTING_FAULT_DEVICE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"

#include "ptd/device.h"

namespace ptd {

struct FaultPlan {
  // 1-based index of the call that fails; 0 never fails. Allocations count
  // blocks: each buffer of AllocateMany (the base class's default, which
  // FaultDevice keeps) is one.
  uint64_t fail_allocation = 0;
  uint64_t fail_staging = 0;
  uint64_t fail_copy = 0;
  uint64_t fail_wait = 0;
  uint64_t fail_prepare = 0;  // PrepareWrite calls.
  // What a failing call returns.
  absl::Status status = absl::ResourceExhaustedError("injected fault");
  // Overrides the wrapped device's host_accessible() when set.
  std::optional<bool> host_accessible;
  // Overrides what MemoryInfo() reports when set (AllocateMappedMany and
  // MemoryInfo otherwise go to the wrapped device unchanged).
  std::optional<DeviceMemoryInfo> memory_info;
  // Copies happen at Wait()/Synchronize()/CopyToHost() rather than at
  // CopyToDeviceAsync(), in issue order.
  bool defer_copies = false;
};

struct FaultCounts {
  uint64_t allocations = 0;  // Allocate calls, failed ones included.
  uint64_t staging_allocations = 0;
  uint64_t copies = 0;
  uint64_t waits = 0;
  uint64_t prepares = 0;  // PrepareWrite calls, failed ones included.
  uint64_t prepared_bytes = 0;
  uint64_t live_staging_bytes = 0;  // Staging bytes handed out, not freed.
  uint64_t peak_live_staging_bytes = 0;
  uint64_t live_allocations = 0;  // Device blocks handed out, not freed.
};

class FaultDevice final : public Device {
 public:
  explicit FaultDevice(std::shared_ptr<Device> inner, FaultPlan plan = {});
  ~FaultDevice() override;

  FaultCounts counts() const;
  Device& inner() const { return *inner_; }

  DeviceKind kind() const override { return inner_->kind(); }
  int index() const override { return inner_->index(); }
  std::string name() const override { return "fault(" + inner_->name() + ")"; }
  std::optional<uint32_t> compute_capability() const override {
    return inner_->compute_capability();
  }
  bool host_accessible() const override;

  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override;
  // Counts, fails the plan's call, else forwards to the wrapped device.
  absl::Status PrepareWrite(void* p, size_t n) override;
  absl::StatusOr<std::vector<DeviceBuffer>> AllocateMappedMany(
      absl::Span<const size_t> sizes) override {
    return inner_->AllocateMappedMany(sizes);
  }
  absl::StatusOr<DeviceMemoryInfo> MemoryInfo() override;
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override;
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t nbytes) override;
  absl::Status Wait(const CopyTicket& ticket) override;
  absl::Status Synchronize() override;
  absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) override;
  DeviceStats stats() const override { return inner_->stats(); }

 private:
  struct Pending {
    uint64_t id;
    void* dst;
    const void* src;
    size_t nbytes;
  };
  struct Shared;  // Counters shared with the deleters of wrapped blocks.

  // Runs deferred copies up to ticket `id` (all when ~0). REQUIRES: mu_ held.
  absl::Status FlushLocked(uint64_t id);
  template <typename Buffer>
  Buffer Wrap(Buffer inner);

  std::shared_ptr<Device> inner_;
  mutable std::mutex mu_;
  FaultPlan plan_;
  std::shared_ptr<Shared> shared_;
  std::deque<Pending> pending_;
  std::map<uint64_t, CopyTicket> inner_tickets_;  // Ours -> the wrapped device's.
  uint64_t next_ticket_ = 0;
};

}  // namespace ptd

#endif  // PTD_TESTING_FAULT_DEVICE_H_
