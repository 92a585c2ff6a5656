// Tests of CudaDevice's allocation, staging, copies and errors
// (include/ptd/cuda_device.h). They need a GPU and skip without one, except
// the Open tests, which check the clean error a machine without one gets.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptd/cuda_device.h"
#include "tests/cuda/cuda_test_util.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr size_t kMiB = size_t{1} << 20;

TEST(CudaOpenTest, MissingDeviceIsACleanError) {
  const int count = CudaDeviceCount();
  ASSERT_GE(count, 0);
  const auto device = OpenCudaDevice(count);  // One past the last.
  ASSERT_FALSE(device.ok());
  if (count == 0) {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kUnavailable) << device.status();
    EXPECT_THAT(std::string(device.status().message()), StartsWith("no CUDA device"));
  } else {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << device.status();
    EXPECT_THAT(device.status().message(), HasSubstr("does not exist"));
  }
  EXPECT_FALSE(OpenCudaDevice(-1).ok());
}

TEST_F(CudaTest, Identity) {
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device_->index(), 0);
  EXPECT_FALSE(device_->host_accessible());
  ASSERT_TRUE(device_->compute_capability().has_value());
  EXPECT_GE(*device_->compute_capability(), 75u);
  EXPECT_THAT(device_->name(), StartsWith("cuda:0 ("));
  EXPECT_THAT(device_->name(), HasSubstr(", sm_" + std::to_string(*device_->compute_capability()) + ")"));
}

TEST_F(CudaTest, CopyRoundTripThroughStagingOnTwoStreams) {
  const std::vector<size_t> sizes = {1000, 1, 0, 4096, 3 * kMiB + 7};
  auto buffers = device_->AllocateMany(sizes);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> expected;
  std::set<uint32_t> streams;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto slot = device_->AllocateStaging(sizes[i]);
    ASSERT_TRUE(slot.ok()) << slot.status();
    std::vector<uint8_t> bytes(sizes[i]);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (!bytes.empty()) std::memcpy(slot->data(), bytes.data(), bytes.size());
    auto ticket = device_->CopyToDeviceAsync((*buffers)[i].data(), slot->data(), sizes[i]);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    streams.insert(ticket->stream);
    ASSERT_TRUE(device_->Wait(*ticket).ok());
    ASSERT_TRUE(device_->Wait(*ticket).ok()) << "a second Wait on a finished copy is OK";
    expected.push_back(std::move(bytes));
  }
  EXPECT_GE(streams.size(), 2u);
  ASSERT_TRUE(device_->Synchronize().ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> back(sizes[i]);
    ASSERT_TRUE(device_->CopyToHost(back.data(), (*buffers)[i].data(), sizes[i]).ok());
    EXPECT_EQ(back, expected[i]) << "buffer " << i;
  }
  const DeviceStats stats = device_->stats();
  EXPECT_EQ(stats.copies, sizes.size());
  EXPECT_EQ(stats.copied_bytes, std::accumulate(sizes.begin(), sizes.end(), uint64_t{0}));
}

TEST_F(CudaTest, ArenaMakesOneAllocationForManyStorages) {
  std::vector<size_t> sizes(65536);
  std::mt19937 rng(2);
  for (auto& s : sizes) s = rng() % 700;
  {
    auto buffers = device_->AllocateMany(sizes);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    const DeviceStats stats = device_->stats();
    EXPECT_EQ(stats.allocations, 1u);
    EXPECT_EQ(stats.live_allocations, 1u);
    uintptr_t end = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto p = reinterpret_cast<uintptr_t>((*buffers)[i].data());
      EXPECT_EQ(p % kDeviceAlignment, 0u) << i;
      EXPECT_GE(p, end) << "buffer " << i << " overlaps the one before";
      EXPECT_EQ((*buffers)[i].size(), sizes[i]);
      end = p + sizes[i];
    }
    // The arena lives while any slice does.
    DeviceBuffer last = (*buffers)[100];
    buffers->clear();
    EXPECT_EQ(device_->stats().live_allocations, 1u);
  }
  EXPECT_EQ(device_->stats().live_allocations, 0u);
  EXPECT_EQ(device_->stats().live_bytes, 0u);
}

TEST_F(CudaTest, StagingIsReusedAcrossLoads) {
  uint64_t after_first = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<HostBuffer> ring;
    for (int i = 0; i < 4; ++i) {
      auto slot = device_->AllocateStaging(kMiB);
      ASSERT_TRUE(slot.ok()) << slot.status();
      ring.push_back(*std::move(slot));
    }
    auto target = device_->Allocate(kMiB);
    ASSERT_TRUE(target.ok());
    for (auto& slot : ring) {
      std::memset(slot.data(), round, kMiB);
      auto ticket = device_->CopyToDeviceAsync(target->data(), slot.data(), kMiB);
      ASSERT_TRUE(ticket.ok());
      ASSERT_TRUE(device_->Wait(*ticket).ok());
    }
    EXPECT_EQ(device_->stats().live_staging_bytes, 4 * kMiB);
    ring.clear();
    EXPECT_EQ(device_->stats().live_staging_bytes, 0u);
    EXPECT_EQ(device_->staging_cache_bytes(), 4 * kMiB);
    if (round == 0) after_first = device_->stats().staging_allocations;
  }
  EXPECT_EQ(after_first, 4u);
  EXPECT_EQ(device_->stats().staging_allocations, 4u);
  device_->TrimStagingCache();
  EXPECT_EQ(device_->staging_cache_bytes(), 0u);
}

TEST_F(CudaTest, ErrorsAreStatusesAndLeaveNothingAllocated) {
  // Tickets this device never issued.
  EXPECT_EQ(device_->Wait(CopyTicket{0, 0}).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status bogus = device_->Wait(CopyTicket{123456789, 0});
  EXPECT_EQ(bogus.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bogus.message(), HasSubstr("was not issued here"));

  // Out of device memory.
  const auto huge = device_->Allocate(size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(std::string(huge.status().message()), StartsWith("cudaMalloc on cuda:0: "));
  const std::vector<size_t> too_many = {size_t{1} << 49, size_t{1} << 49, size_t{1} << 49};
  EXPECT_EQ(device_->AllocateMany(too_many).status().code(),
            absl::StatusCode::kResourceExhausted);
  const std::vector<size_t> overflow = {~size_t{0} - 10, 100};
  EXPECT_EQ(device_->AllocateMany(overflow).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(device_->stats().live_allocations, 0u);
  EXPECT_EQ(device_->stats().live_bytes, 0u);

  // The failures are not sticky: the device still works, and a ticket on
  // the wrong stream is refused.
  auto buffer = device_->Allocate(64);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::vector<uint8_t> host(64, 7), back(64);
  auto ticket = device_->CopyToDeviceAsync(buffer->data(), host.data(), host.size());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(device_->Wait(CopyTicket{ticket->id, ticket->stream + 1}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(device_->Wait(*ticket).ok());
  ASSERT_TRUE(device_->CopyToHost(back.data(), buffer->data(), back.size()).ok());
  EXPECT_EQ(back, host);
  *buffer = DeviceBuffer();
  EXPECT_EQ(device_->stats().live_allocations, 0u);
}

TEST_F(CudaTest, SynchronizeCoversUnwaitedTickets) {
  auto buffer = device_->Allocate(kMiB);
  ASSERT_TRUE(buffer.ok());
  std::vector<uint8_t> host(kMiB, 3);
  std::vector<CopyTicket> tickets;
  for (int i = 0; i < 16; ++i) {
    auto ticket = device_->CopyToDeviceAsync(buffer->data(), host.data(), host.size());
    ASSERT_TRUE(ticket.ok());
    tickets.push_back(*ticket);
  }
  ASSERT_TRUE(device_->Synchronize().ok());
  for (const CopyTicket& t : tickets) EXPECT_TRUE(device_->Wait(t).ok());
}

}  // namespace
}  // namespace ptd
