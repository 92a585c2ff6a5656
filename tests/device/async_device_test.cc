// Tests of AsyncDevice, the asynchronous test device: copies complete later,
// on its workers, out of order, reading their source only then; Wait covers
// a stream's earlier copies; CopyToHost and Synchronize see every copy
// issued before them; foreign tickets and host pointers are refused; a
// staging block dropped with a copy in flight completes it and is counted.
#include "ptd/testing/async_device.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> ReadBack(AsyncDevice& dev, const DeviceBuffer& b, size_t n) {
  std::vector<uint8_t> out(n);
  EXPECT_TRUE(dev.CopyToHost(out.data(), b.data(), n).ok());
  return out;
}

TEST(AsyncDeviceTest, ACopyReadsItsSourceOnlyWhenItCompletes) {
  AsyncDevice dev;
  EXPECT_FALSE(dev.host_accessible());
  auto dst = dev.Allocate(4096);
  auto staging = dev.AllocateStaging(4096);
  ASSERT_TRUE(dst.ok() && staging.ok());
  const std::vector<uint8_t> first = Bytes(4096, 1), second = Bytes(4096, 2);
  std::memcpy(staging->data(), first.data(), first.size());
  dev.Hold();
  auto t = dev.CopyToDeviceAsync(dst->data(), staging->data(), 4096);
  ASSERT_TRUE(t.ok()) << t.status();
  // The slot is reused before the copy is waited on: the copy takes the new
  // bytes, which is what a loader with a missing Wait would load.
  std::memcpy(staging->data(), second.data(), second.size());
  dev.Release();
  ASSERT_TRUE(dev.Wait(*t).ok());
  EXPECT_EQ(ReadBack(dev, *dst, 4096), second);
  EXPECT_EQ(dev.counts().completed, 1u);
}

TEST(AsyncDeviceTest, CopiesCompleteOutOfOrderOnWorkers) {
  AsyncDevice dev(AsyncDeviceOptions{.seed = 42, .workers = 4, .max_delay_us = 2000});
  constexpr size_t kCopies = 300, kBytes = 256;
  auto dst = dev.Allocate(kCopies * kBytes);
  ASSERT_TRUE(dst.ok());
  std::vector<std::vector<uint8_t>> src;
  for (size_t i = 0; i < kCopies; ++i) src.push_back(Bytes(kBytes, static_cast<uint8_t>(i)));
  for (size_t i = 0; i < kCopies; ++i) {
    ASSERT_TRUE(dev.CopyToDeviceAsync(static_cast<uint8_t*>(dst->data()) + i * kBytes,
                                      src[i].data(), kBytes)
                    .ok());
  }
  ASSERT_TRUE(dev.Synchronize().ok());
  const AsyncCounts c = dev.counts();
  EXPECT_EQ(c.completed, kCopies);
  EXPECT_GT(c.out_of_order, 0u);
  EXPECT_GT(c.max_in_flight, 1u);
  const std::vector<uint8_t> all = ReadBack(dev, *dst, kCopies * kBytes);
  for (size_t i = 0; i < kCopies; ++i) {
    EXPECT_EQ(0, std::memcmp(all.data() + i * kBytes, src[i].data(), kBytes)) << i;
  }
}

TEST(AsyncDeviceTest, WaitCoversEveryEarlierCopyOfItsStream) {
  AsyncDevice dev(AsyncDeviceOptions{.workers = 4, .streams = 2, .max_delay_us = 1000});
  constexpr size_t kCopies = 64;
  auto dst = dev.Allocate(kCopies);
  ASSERT_TRUE(dst.ok());
  std::vector<uint8_t> src(kCopies);
  for (size_t i = 0; i < kCopies; ++i) src[i] = static_cast<uint8_t>(i + 1);
  std::vector<CopyTicket> tickets;
  for (size_t i = 0; i < kCopies; ++i) {
    auto t = dev.CopyToDeviceAsync(static_cast<uint8_t*>(dst->data()) + i, &src[i], 1);
    ASSERT_TRUE(t.ok());
    tickets.push_back(*t);
  }
  // The last ticket of one stream: every earlier copy on it is done.
  const CopyTicket last = tickets.back();
  ASSERT_TRUE(dev.Wait(last).ok());
  // Read the destination without CopyToHost's own waiting: the memory is
  // host memory underneath, and Wait established the order.
  const auto* d = static_cast<const uint8_t*>(dst->data());
  for (size_t i = 0; i < kCopies; ++i) {
    if (tickets[i].stream == last.stream) {
      EXPECT_EQ(d[i], src[i]) << i;
    }
  }
  ASSERT_TRUE(dev.Synchronize().ok());
}

TEST(AsyncDeviceTest, CopyToHostSeesCopiesNotWaitedOn) {
  AsyncDevice dev(AsyncDeviceOptions{.max_delay_us = 3000});
  auto dst = dev.Allocate(1 << 16);
  ASSERT_TRUE(dst.ok());
  const std::vector<uint8_t> src = Bytes(1 << 16, 9);
  ASSERT_TRUE(dev.CopyToDeviceAsync(dst->data(), src.data(), src.size()).ok());
  EXPECT_EQ(ReadBack(dev, *dst, src.size()), src);
  EXPECT_EQ(dev.counts().copies_to_host, 1u);
}

TEST(AsyncDeviceTest, RefusesForeignTicketsAndHostPointers) {
  AsyncDevice dev;
  auto dst = dev.Allocate(64);
  ASSERT_TRUE(dst.ok());
  std::vector<uint8_t> host(64);
  const absl::Status wait = dev.Wait(CopyTicket{.id = 99, .stream = 1});
  EXPECT_EQ(wait.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wait.message(), HasSubstr("ticket 99"));
  const auto to_host = dev.CopyToDeviceAsync(host.data(), host.data(), 64);
  EXPECT_EQ(to_host.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(to_host.status().message(), HasSubstr("destination (64 bytes)"));
  // One byte past the allocation.
  const auto past = dev.CopyToDeviceAsync(static_cast<uint8_t*>(dst->data()) + 1, host.data(), 64);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status back = dev.CopyToHost(host.data(), host.data(), 64);
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.message(), HasSubstr("source (64 bytes)"));
  // Zero bytes: nothing to check, nothing done.
  EXPECT_TRUE(dev.CopyToHost(nullptr, nullptr, 0).ok());
}

TEST(AsyncDeviceTest, DroppingStagingWithACopyInFlightCompletesItAndCounts) {
  AsyncDevice dev;
  auto dst = dev.Allocate(4096);
  ASSERT_TRUE(dst.ok());
  const std::vector<uint8_t> src = Bytes(4096, 5);
  dev.Hold();
  {
    auto staging = dev.AllocateStaging(4096);
    ASSERT_TRUE(staging.ok());
    std::memcpy(staging->data(), src.data(), src.size());
    ASSERT_TRUE(dev.CopyToDeviceAsync(dst->data(), staging->data(), 4096).ok());
    EXPECT_EQ(dev.stats().live_staging_bytes, 4096u);
  }  // The block goes here, its copy still queued.
  EXPECT_EQ(dev.counts().staging_freed_in_flight, 1u);
  EXPECT_EQ(dev.stats().live_staging_bytes, 0u);
  dev.Release();
  EXPECT_EQ(ReadBack(dev, *dst, 4096), src);
}

TEST(AsyncDeviceTest, ABrokenWaitReturnsBeforeTheCopy) {
  AsyncDevice dev;
  dev.set_broken_wait(true);
  auto dst = dev.Allocate(16);
  ASSERT_TRUE(dst.ok());
  const std::vector<uint8_t> src = Bytes(16, 3);
  dev.Hold();
  auto t = dev.CopyToDeviceAsync(dst->data(), src.data(), 16);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(dev.Wait(*t).ok());  // Returns though the copy is held.
  EXPECT_EQ(dev.counts().completed, 0u);
  dev.Release();
  ASSERT_TRUE(dev.Synchronize().ok());
  EXPECT_EQ(dev.counts().completed, 1u);
}

TEST(AsyncDeviceTest, StatsCountBlocksAndCopies) {
  AsyncDevice dev;
  {
    auto many = dev.AllocateMany({10, 0, 300});
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(dev.stats().live_allocations, 3u);
    for (const DeviceBuffer& b : *many) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kDeviceAlignment, 0u);
    }
  }
  EXPECT_EQ(dev.stats().live_allocations, 0u);
  EXPECT_EQ(dev.stats().live_bytes, 0u);
  EXPECT_EQ(dev.stats().allocations, 3u);
}

}  // namespace
}  // namespace ptd
