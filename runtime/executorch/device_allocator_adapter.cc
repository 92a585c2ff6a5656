#include "ptd/executorch/device_allocator_adapter.h"

#include <utility>

namespace ptd {

namespace et = ::executorch::runtime;

DeviceAllocatorAdapter::DeviceAllocatorAdapter(std::shared_ptr<Device> device)
    : device_(std::move(device)) {}

// Buffers never deallocated are freed here, before the device reference goes.
DeviceAllocatorAdapter::~DeviceAllocatorAdapter() = default;

et::Error DeviceAllocatorAdapter::ToError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return et::Error::Ok;
    case absl::StatusCode::kResourceExhausted:
      return et::Error::MemoryAllocationFailed;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return et::Error::InvalidArgument;
    default:
      return et::Error::Internal;
  }
}

bool DeviceAllocatorAdapter::IsThisDevice(et::etensor::DeviceIndex index) const {
  return static_cast<int>(index) == device_->index();
}

et::Result<void*> DeviceAllocatorAdapter::allocate(size_t nbytes, et::etensor::DeviceIndex index,
                                                   size_t alignment) {
  if (!IsThisDevice(index) || alignment == 0 || (alignment & (alignment - 1)) != 0 ||
      alignment > kDeviceAlignment) {
    return et::Error::InvalidArgument;
  }
  absl::StatusOr<DeviceBuffer> buffer = device_->Allocate(nbytes);
  if (!buffer.ok()) return ToError(buffer.status());
  void* data = buffer->data();
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace(data, *std::move(buffer));
  return data;
}

void DeviceAllocatorAdapter::deallocate(void* ptr, et::etensor::DeviceIndex index) {
  if (ptr == nullptr || !IsThisDevice(index)) return;
  DeviceBuffer released;  // Freed after the lock is dropped.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  released = std::move(it->second);
  live_.erase(it);
}

et::Error DeviceAllocatorAdapter::copy_host_to_device(void* dst, const void* src, size_t nbytes,
                                                      et::etensor::DeviceIndex index) {
  if (!IsThisDevice(index)) return et::Error::InvalidArgument;
  absl::StatusOr<CopyTicket> ticket = device_->CopyToDeviceAsync(dst, src, nbytes);
  if (!ticket.ok()) return ToError(ticket.status());
  return ToError(device_->Wait(*ticket));
}

et::Error DeviceAllocatorAdapter::copy_device_to_host(void* dst, const void* src, size_t nbytes,
                                                      et::etensor::DeviceIndex index) {
  if (!IsThisDevice(index)) return et::Error::InvalidArgument;
  return ToError(device_->CopyToHost(dst, src, nbytes));
}

et::etensor::DeviceType DeviceAllocatorAdapter::device_type() const {
  return device_->kind() == DeviceKind::kCuda ? et::etensor::DeviceType::CUDA
                                              : et::etensor::DeviceType::CPU;
}

size_t DeviceAllocatorAdapter::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace ptd
