// DeviceAllocatorAdapter's contract (include/ptd/executorch/
// device_allocator_adapter.h) over a plain host-memory Device, so it runs
// without a GPU: allocation and alignment checks, the pointer map,
// copies both ways, device index and type, and status-to-error mapping.
#include "ptd/executorch/device_allocator_adapter.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace ptd {
namespace {

namespace et = ::executorch::runtime;

// Host memory as a Device, with an allocation limit to provoke
// ResourceExhausted.
class MallocDevice : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kHost; }
  int index() const override { return 0; }
  std::string name() const override { return "malloc"; }
  bool host_accessible() const override { return true; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override {
    if (nbytes > limit) return absl::ResourceExhaustedError("over the limit");
    void* p =
        std::aligned_alloc(kDeviceAlignment, (std::max<size_t>(nbytes, 1) + kDeviceAlignment - 1) /
                                                 kDeviceAlignment * kDeviceAlignment);
    ++live;
    return DeviceBuffer(std::shared_ptr<void>(p,
                                              [this](void* q) {
                                                std::free(q);
                                                --live;
                                              }),
                        p, nbytes);
  }
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override {
    absl::StatusOr<DeviceBuffer> b = Allocate(nbytes);
    if (!b.ok()) return b.status();
    // The same memory, handed out as staging: a host fake has only one kind.
    return HostBuffer(std::shared_ptr<void>(std::make_shared<DeviceBuffer>(*b), b->data()),
                      b->data(), b->size());
  }
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return CopyTicket{++tickets, 0};
  }
  absl::Status Wait(const CopyTicket& ticket) override {
    return ticket.id > 0 && ticket.id <= tickets ? absl::OkStatus()
                                                 : absl::InvalidArgumentError("bad ticket");
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status CopyToHost(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  DeviceStats stats() const override { return {}; }

  size_t limit = size_t{1} << 30;
  int live = 0;
  uint64_t tickets = 0;
};

TEST(DeviceAllocatorAdapterTest, AllocatesCopiesAndFrees) {
  auto device = std::make_shared<MallocDevice>();
  DeviceAllocatorAdapter adapter(device);
  EXPECT_EQ(adapter.device_type(), et::etensor::DeviceType::CPU);
  et::Result<void*> p = adapter.allocate(100, 0, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 64, 0u);
  EXPECT_EQ(adapter.live_allocations(), 1u);
  std::vector<uint8_t> in(100), out(100);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(adapter.copy_host_to_device(p.get(), in.data(), in.size(), 0), et::Error::Ok);
  EXPECT_EQ(adapter.copy_device_to_host(out.data(), p.get(), out.size(), 0), et::Error::Ok);
  EXPECT_EQ(in, out);
  adapter.deallocate(p.get(), 0);
  EXPECT_EQ(adapter.live_allocations(), 0u);
  EXPECT_EQ(device->live, 0);
  adapter.deallocate(p.get(), 0);  // Twice: ignored.
  adapter.deallocate(nullptr, 0);
}

TEST(DeviceAllocatorAdapterTest, RefusesWhatItCannotHonour) {
  auto device = std::make_shared<MallocDevice>();
  DeviceAllocatorAdapter adapter(device);
  EXPECT_EQ(adapter.allocate(8, 0, 512).error(), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.allocate(8, 0, 48).error(), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.allocate(8, 0, 0).error(), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.allocate(8, 1).error(), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.allocate(size_t{1} << 40, 0).error(), et::Error::MemoryAllocationFailed);
  uint8_t byte = 0;
  EXPECT_EQ(adapter.copy_host_to_device(&byte, &byte, 1, 3), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.copy_device_to_host(&byte, &byte, 1, 3), et::Error::InvalidArgument);
  EXPECT_EQ(adapter.live_allocations(), 0u);
  EXPECT_EQ(device->live, 0);
}

TEST(DeviceAllocatorAdapterTest, FreesWhatWasNeverDeallocated) {
  auto device = std::make_shared<MallocDevice>();
  {
    DeviceAllocatorAdapter adapter(device);
    ASSERT_TRUE(adapter.allocate(10, 0).ok());
    ASSERT_TRUE(adapter.allocate(0, 0).ok());
    EXPECT_EQ(device->live, 2);
  }
  EXPECT_EQ(device->live, 0);
}

TEST(DeviceAllocatorAdapterTest, MapsStatuses) {
  EXPECT_EQ(DeviceAllocatorAdapter::ToError(absl::OkStatus()), et::Error::Ok);
  EXPECT_EQ(DeviceAllocatorAdapter::ToError(absl::ResourceExhaustedError("")),
            et::Error::MemoryAllocationFailed);
  EXPECT_EQ(DeviceAllocatorAdapter::ToError(absl::InvalidArgumentError("")),
            et::Error::InvalidArgument);
  EXPECT_EQ(DeviceAllocatorAdapter::ToError(absl::InternalError("")), et::Error::Internal);
}

}  // namespace
}  // namespace ptd
