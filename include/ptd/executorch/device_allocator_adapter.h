// DeviceAllocatorAdapter: any ptd::Device (the CUDA device, the host device,
// a fault-injecting one) as ExecuTorch's executorch::runtime::DeviceAllocator,
// so the ExecuTorch runtime can allocate and copy through the same device
// object the loader filled.
//
//   auto gpu = ptd::CudaDevice::Open(0);
//   static ptd::DeviceAllocatorAdapter adapter(*gpu);
//   executorch::runtime::register_device_allocator(&adapter);
//
// allocate() hands out a DeviceBuffer's pointer and keeps the buffer in a map
// until deallocate(); copy_host_to_device is CopyToDeviceAsync + Wait;
// copy_device_to_host is CopyToHost. ptd statuses become ExecuTorch errors:
// ResourceExhausted -> MemoryAllocationFailed, InvalidArgument/OutOfRange ->
// InvalidArgument, anything else -> Internal. Requests for another device
// index, or an alignment that is not a power of two or exceeds
// kDeviceAlignment (256), are InvalidArgument.
// Thread-safety: every method may be called concurrently. The adapter holds
// the device, so the device outlives every pointer it handed out.
#ifndef PTD_EXECUTORCH_DEVICE_ALLOCATOR_ADAPTER_H_
#define PTD_EXECUTORCH_DEVICE_ALLOCATOR_ADAPTER_H_

#include <executorch/runtime/core/device_allocator.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "absl/status/status.h"

#include "ptd/device.h"

namespace ptd {

class DeviceAllocatorAdapter : public executorch::runtime::DeviceAllocator {
 public:
  explicit DeviceAllocatorAdapter(std::shared_ptr<Device> device);
  ~DeviceAllocatorAdapter() override;

  DeviceAllocatorAdapter(const DeviceAllocatorAdapter&) = delete;
  DeviceAllocatorAdapter& operator=(const DeviceAllocatorAdapter&) = delete;

  executorch::runtime::Result<void*> allocate(size_t nbytes,
                                              executorch::runtime::etensor::DeviceIndex index,
                                              size_t alignment = kDefaultAlignment) override;
  // Unknown pointers (and nullptr) are ignored.
  void deallocate(void* ptr, executorch::runtime::etensor::DeviceIndex index) override;
  executorch::runtime::Error copy_host_to_device(
      void* dst, const void* src, size_t nbytes,
      executorch::runtime::etensor::DeviceIndex index) override;
  executorch::runtime::Error copy_device_to_host(
      void* dst, const void* src, size_t nbytes,
      executorch::runtime::etensor::DeviceIndex index) override;
  executorch::runtime::etensor::DeviceType device_type() const override;

  Device& device() const { return *device_; }
  // Allocations handed out and not yet deallocated.
  size_t live_allocations() const;

  // The ExecuTorch error for a ptd status (Ok for OK).
  static executorch::runtime::Error ToError(const absl::Status& status);

 private:
  bool IsThisDevice(executorch::runtime::etensor::DeviceIndex index) const;

  std::shared_ptr<Device> device_;
  mutable std::mutex mu_;
  std::unordered_map<void*, DeviceBuffer> live_;  // Guarded by mu_.
};

}  // namespace ptd

#endif  // PTD_EXECUTORCH_DEVICE_ALLOCATOR_ADAPTER_H_
