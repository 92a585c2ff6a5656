// AsyncDevice: a Device for tests that behaves like a GPU's copy engines
// without one. Its memory is host memory underneath, but it says it is not
// host-accessible, so the loader stages every byte through its ring. Each
// CopyToDeviceAsync is queued and completed later by worker threads, after a
// random (seeded) delay, so copies finish out of issue order; a copy reads
// its source only when it completes. A loader that reuses or frees a staging
// buffer before Wait() on its copies returned therefore loads the wrong
// bytes, and a digest of the loaded storage catches it.
//
// Test support: target ptd::testing (with FaultDevice, ptd/testing/
// fault_device.h), not part of ptd::device; installed for the reason given
// there (a consumer's own tests of the asynchronous path, without a GPU).
//
// Example:
//   auto dev = std::make_shared<AsyncDevice>(AsyncDeviceOptions{.seed = 7});
//   auto w = LoadWeights(bundle, dev);
//   DigestLoadedWeight(*w, *w->Find("layer.weight"));  // Through CopyToHost.
//   dev->counts().out_of_order;                        // > 0: it was async.
//
// Contract as ptd/device.h, plus: Wait(ticket) returns once every copy of
// the ticket's stream issued up to it is done; CopyToHost and Synchronize
// first wait for every copy issued before them. A staging block whose last
// handle goes while a copy from it is still queued completes that copy
// first (as cudaFreeHost would) and counts it in
// counts().staging_freed_in_flight: a correct loader never does that.
//
// Thread-safety: every method may be called concurrently. The device must
// outlive every buffer it hands out; its destructor completes queued copies.
#ifndef PTD_TESTING_ASYNC_DEVICE_H_
#define PTD_TESTING_ASYNC_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "ptd/device.h"

namespace ptd {

struct AsyncDeviceOptions {
  // Seeds the delays; the same seed gives the same delays (the order in
  // which copies complete still depends on thread scheduling).
  uint64_t seed = 1;
  // Worker threads completing copies (>= 1), and streams tickets name.
  int workers = 3;
  int streams = 2;
  // Each copy completes after a delay drawn uniformly from [0, max_delay_us]
  // microseconds after it was issued.
  uint32_t max_delay_us = 200;
  // What the device reports itself as. kCuda by default, so that the loader
  // sends CPU weights to host memory as it does for a GPU.
  DeviceKind kind = DeviceKind::kCuda;
  std::optional<uint32_t> compute_capability;
};

struct AsyncCounts {
  uint64_t copies = 0;          // CopyToDeviceAsync calls that issued a copy.
  uint64_t completed = 0;       // Copies done.
  uint64_t out_of_order = 0;    // Copies that completed before an older one.
  uint64_t max_in_flight = 0;   // Most copies queued at once.
  uint64_t waits = 0;           // Wait calls.
  uint64_t copies_to_host = 0;  // CopyToHost calls (a zero-byte one included).
  uint64_t bytes_to_host = 0;
  uint64_t staging_freed_in_flight = 0;  // See the header comment.
};

class AsyncDevice final : public Device {
 public:
  explicit AsyncDevice(AsyncDeviceOptions options = {});
  ~AsyncDevice() override;
  AsyncDevice(const AsyncDevice&) = delete;
  AsyncDevice& operator=(const AsyncDevice&) = delete;

  AsyncCounts counts() const;
  // While held, no copy completes (Wait blocks until Release()): a test can
  // then change a copy's source and see that the copy reads it late.
  void Hold();
  void Release();
  // A deliberately broken device for tests of the tests: Wait() returns OK at
  // once without waiting. Copies still complete (at the latest when their
  // staging block goes, at CopyToHost or at Synchronize).
  void set_broken_wait(bool broken);

  DeviceKind kind() const override { return options_.kind; }
  int index() const override { return 0; }
  std::string name() const override { return "async:0"; }
  std::optional<uint32_t> compute_capability() const override {
    return options_.compute_capability;
  }
  bool host_accessible() const override { return false; }

  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override;
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override;
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t nbytes) override;
  absl::Status Wait(const CopyTicket& ticket) override;
  absl::Status Synchronize() override;
  absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) override;
  DeviceStats stats() const override;

 private:
  struct State;
  const AsyncDeviceOptions options_;
  std::shared_ptr<State> state_;  // Shared with the workers and block deleters.
};

}  // namespace ptd

#endif  // PTD_TESTING_ASYNC_DEVICE_H_
