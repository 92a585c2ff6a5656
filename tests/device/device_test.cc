// Tests of the device seam's host parts: HostDevice, FaultDevice, the
// default AllocateMany, and OpenDevice.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "ptd/open_device.h"
#include "ptd/testing/fault_device.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;

TEST(HostDeviceTest, AllocatesAlignedBlocksAndCountsThem) {
  HostDevice dev;
  {
    auto a = dev.Allocate(1000);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % kDeviceAlignment, 0u);
    EXPECT_EQ(a->size(), 1000u);
    auto z = dev.Allocate(0);
    ASSERT_TRUE(z.ok());
    EXPECT_TRUE(static_cast<bool>(*z));
    const DeviceStats s = dev.stats();
    EXPECT_EQ(s.allocations, 2u);
    EXPECT_EQ(s.live_allocations, 2u);
    EXPECT_EQ(s.live_bytes, 1000u);
  }
  EXPECT_EQ(dev.stats().live_allocations, 0u);
  EXPECT_EQ(dev.stats().live_bytes, 0u);
}

TEST(HostDeviceTest, AllocateManyCarvesAlignedDisjointBuffersFromOneBlock) {
  HostDevice dev;
  EXPECT_EQ(dev.buffer_alignment(), kHostAlignment);
  const std::vector<size_t> sizes = {16, 0, 300, 256, 1};
  auto bufs = dev.AllocateMany(sizes);
  ASSERT_TRUE(bufs.ok()) << bufs.status();
  ASSERT_EQ(bufs->size(), sizes.size());
  // Aligned, sized as asked, distinct even when empty, and disjoint: fill
  // each with its own byte and read every one back.
  for (size_t i = 0; i < sizes.size(); ++i) {
    const DeviceBuffer& b = (*bufs)[i];
    EXPECT_EQ(b.size(), sizes[i]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHostAlignment, 0u) << i;
    if (i > 0) {
      // Packed: each buffer starts at the first kHostAlignment boundary
      // after the one before (a zero-byte buffer takes one byte).
      const size_t before = std::max<size_t>(sizes[i - 1], 1);
      const size_t step = (before + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
      EXPECT_EQ(static_cast<const uint8_t*>(b.data()) -
                    static_cast<const uint8_t*>((*bufs)[i - 1].data()),
                static_cast<ptrdiff_t>(step))
          << i;
    }
    if (b.size() > 0) std::memset(b.data(), static_cast<int>(i + 1), b.size());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>((*bufs)[i].data());
    for (size_t k = 0; k < sizes[i]; ++k) ASSERT_EQ(p[k], i + 1) << i << " " << k;
  }
  // Stats count one allocation per buffer.
  EXPECT_EQ(dev.stats().allocations, sizes.size());
  EXPECT_EQ(dev.stats().allocated_bytes, 16u + 300 + 256 + 1);
  EXPECT_EQ(dev.stats().live_allocations, sizes.size());
  // The block lives while any buffer does (ASan checks the write below).
  DeviceBuffer last = (*bufs)[4];
  bufs->clear();
  EXPECT_EQ(dev.stats().live_allocations, sizes.size());
  static_cast<uint8_t*>(last.data())[0] = 7;
  last = DeviceBuffer();
  EXPECT_EQ(dev.stats().live_allocations, 0u);
  EXPECT_EQ(dev.stats().live_bytes, 0u);
}

TEST(HostDeviceTest, AllocateManyOfNothingAllocatesNothing) {
  HostDevice dev;
  auto bufs = dev.AllocateMany(std::vector<size_t>{});
  ASSERT_TRUE(bufs.ok());
  EXPECT_TRUE(bufs->empty());
  EXPECT_EQ(dev.stats().allocations, 0u);
}

TEST(HostDeviceTest, AllocateManyRefusesATotalPastTheAddressSpace) {
  HostDevice dev;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  auto bufs = dev.AllocateMany(std::vector<size_t>{huge, huge, 8});
  ASSERT_FALSE(bufs.ok());
  EXPECT_EQ(bufs.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(bufs.status().message(), HasSubstr("buffer 1 of 3"));
  EXPECT_EQ(bufs.status().GetPayload(kAllocateManyIndexPayload), absl::Cord("1"));
  EXPECT_EQ(dev.stats().live_allocations, 0u);
}

TEST(HostDeviceTest, CopiesBothWays) {
  HostDevice dev;
  auto buf = dev.Allocate(8);
  ASSERT_TRUE(buf.ok());
  const char src[8] = "abcdefg";
  auto t = dev.CopyToDeviceAsync(buf->data(), src, 8);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(dev.Wait(*t).ok());
  char back[8] = {};
  ASSERT_TRUE(dev.CopyToHost(back, buf->data(), 8).ok());
  EXPECT_STREQ(back, "abcdefg");
  EXPECT_EQ(dev.stats().copies, 1u);
  EXPECT_EQ(dev.stats().copied_bytes, 8u);
}

TEST(HostDeviceTest, StagingIsCountedApart) {
  HostDevice dev;
  {
    auto s = dev.AllocateStaging(4096);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(dev.stats().live_staging_bytes, 4096u);
    EXPECT_EQ(dev.stats().staging_allocations, 1u);
    EXPECT_EQ(dev.stats().allocations, 0u);
  }
  EXPECT_EQ(dev.stats().live_staging_bytes, 0u);
}

TEST(FaultDeviceTest, FailsTheNthAllocationOfAllocateManyAndFreesTheRest) {
  auto host = std::make_shared<HostDevice>();
  FaultDevice dev(host, FaultPlan{.fail_allocation = 3});
  auto bufs = dev.AllocateMany(std::vector<size_t>{8, 8, 8, 8});
  ASSERT_FALSE(bufs.ok());
  EXPECT_EQ(bufs.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(bufs.status().message(), HasSubstr("buffer 2 of 4"));
  const auto payload = bufs.status().GetPayload(kAllocateManyIndexPayload);
  ASSERT_TRUE(payload.has_value());
  EXPECT_EQ(std::string(*payload), "2");
  EXPECT_EQ(dev.counts().allocations, 3u);
  EXPECT_EQ(host->stats().live_allocations, 0u);
  EXPECT_EQ(dev.counts().live_allocations, 0u);
}

TEST(FaultDeviceTest, FailsTheNthStagingCopyAndWaitWithTheChosenStatus) {
  auto host = std::make_shared<HostDevice>();
  const absl::Status boom = absl::InternalError("boom");
  FaultDevice dev(host,
                  FaultPlan{.fail_staging = 2, .fail_copy = 2, .fail_wait = 1, .status = boom});
  auto s1 = dev.AllocateStaging(8);
  EXPECT_TRUE(s1.ok());
  EXPECT_EQ(dev.AllocateStaging(8).status(), boom);
  char a[4] = {}, b[4] = {1, 2, 3, 4};
  auto t1 = dev.CopyToDeviceAsync(a, b, 4);
  EXPECT_TRUE(t1.ok());
  EXPECT_EQ(dev.CopyToDeviceAsync(a, b, 4).status(), boom);
  EXPECT_EQ(dev.Wait(*t1), boom);
  EXPECT_TRUE(dev.Wait(*t1).ok());
  const FaultCounts c = dev.counts();
  EXPECT_EQ(c.staging_allocations, 2u);
  EXPECT_EQ(c.copies, 2u);
  EXPECT_EQ(c.waits, 2u);
  EXPECT_EQ(c.live_staging_bytes, 8u);
  EXPECT_EQ(c.peak_live_staging_bytes, 8u);
}

TEST(FaultDeviceTest, DeferredCopiesLandAtWait) {
  auto host = std::make_shared<HostDevice>();
  FaultDevice dev(host, FaultPlan{.host_accessible = false, .defer_copies = true});
  EXPECT_FALSE(dev.host_accessible());
  char dst[4] = {0, 0, 0, 0};
  const char src[4] = {1, 2, 3, 4};
  auto t = dev.CopyToDeviceAsync(dst, src, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(dst[0], 0);  // Not yet.
  ASSERT_TRUE(dev.Wait(*t).ok());
  EXPECT_EQ(std::memcmp(dst, src, 4), 0);
}

TEST(DeviceKindNameTest, NamesEachKindAsADeviceSpecDoes) {
  EXPECT_EQ(DeviceKindName(DeviceKind::kHost), "host");
  EXPECT_EQ(DeviceKindName(DeviceKind::kCuda), "cuda");
  // The host's name is a spec OpenDevice accepts, and names the device.
  auto d = OpenDevice(DeviceKindName(DeviceKind::kHost));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->kind(), DeviceKind::kHost);
  EXPECT_EQ((*d)->name(), DeviceKindName(DeviceKind::kHost));
}

TEST(OpenDeviceTest, HostAndAutoGiveTheHost) {
  for (const char* spec : {"host", "", "auto"}) {
    auto d = OpenDevice(spec);
    ASSERT_TRUE(d.ok()) << spec;
    EXPECT_EQ((*d)->kind(), DeviceKind::kHost);
    EXPECT_TRUE((*d)->host_accessible());
  }
}

TEST(OpenDeviceTest, CpuIsAnAliasOfHost) {
  auto d = OpenDevice("cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->kind(), DeviceKind::kHost);
  EXPECT_EQ((*d)->index(), 0);
  EXPECT_EQ((*d)->name(), "host");
  EXPECT_TRUE((*d)->host_accessible());
  // Only the exact word: no index, no other case.
  for (const char* spec : {"cpu:0", "CPU", "cpux"}) {
    EXPECT_EQ(OpenDevice(spec).status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

TEST(OpenDeviceTest, AnUnknownSpecNamesTheAcceptedOnes) {
  auto d = OpenDevice("gpu");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("expected host (or cpu), cuda or cuda:N"));
}

TEST(OpenDeviceTest, CudaWithoutAFactoryIsUnavailable) {
  auto d = OpenDevice("cuda:1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.status().message(), HasSubstr("built without CUDA"));
}

TEST(OpenDeviceTest, BadSpecsAreInvalidArgument) {
  for (const char* spec : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cudax"}) {
    auto d = OpenDevice(spec);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

TEST(OpenDeviceTest, ARegisteredFactoryServesCuda) {
  int asked = -1;
  RegisterDeviceFactory("cuda", [&](int index) -> absl::StatusOr<std::shared_ptr<Device>> {
    asked = index;
    return std::make_shared<HostDevice>();
  });
  auto d = OpenDevice("cuda:3");
  EXPECT_TRUE(d.ok());
  EXPECT_EQ(asked, 3);
  RegisterDeviceFactory("cuda", nullptr);  // Unregisters.
  EXPECT_EQ(OpenDevice("cuda").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ptd
