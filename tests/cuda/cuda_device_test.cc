// Tests of CudaDevice's allocation, staging, copies and errors
// (include/ptd/cuda_device.h). They need a GPU and skip without one, except
// the Open tests, which check the clean error a machine without one gets.
#include "ptd/cuda_device.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/view_materialize.h"
#include "tests/cuda/cuda_test_util.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr size_t kMiB = size_t{1} << 20;

TEST(CudaOpenTest, MissingDeviceIsACleanError) {
  const int count = CudaDeviceCount();
  ASSERT_GE(count, 0);
  const auto device = CudaDevice::Open(count);  // One past the last.
  ASSERT_FALSE(device.ok());
  if (count == 0) {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kUnavailable) << device.status();
    EXPECT_THAT(std::string(device.status().message()), StartsWith("no CUDA device"));
  } else {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << device.status();
    EXPECT_THAT(device.status().message(), HasSubstr("does not exist"));
  }
  EXPECT_FALSE(CudaDevice::Open(-1).ok());
}

TEST_F(CudaTest, Identity) {
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device_->index(), 0);
  EXPECT_FALSE(device_->host_accessible());
  ASSERT_TRUE(device_->compute_capability().has_value());
  EXPECT_GE(*device_->compute_capability(), 75u);
  EXPECT_THAT(device_->name(), StartsWith("cuda:0 ("));
  EXPECT_THAT(device_->name(),
              HasSubstr(", sm_" + std::to_string(*device_->compute_capability()) + ")"));
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
  EXPECT_EQ(device_->AllocateMany(too_many).status().code(), absl::StatusCode::kResourceExhausted);
  const std::vector<size_t> overflow = {~size_t{0} - 10, 100};
  EXPECT_EQ(device_->AllocateMany(overflow).status().code(), absl::StatusCode::kResourceExhausted);
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

// Copies from pinned staging (truly asynchronous, unlike pageable memory),
// 16 x 4 MiB, none waited on.
TEST_F(CudaTest, SynchronizeCoversUnwaitedTickets) {
  constexpr size_t kPiece = 4 * kMiB, kPieces = 16;
  auto buffer = device_->Allocate(kPiece * kPieces);
  ASSERT_TRUE(buffer.ok());
  std::vector<HostBuffer> slots;
  std::vector<CopyTicket> tickets;
  for (size_t i = 0; i < kPieces; ++i) {
    auto slot = device_->AllocateStaging(kPiece);
    ASSERT_TRUE(slot.ok()) << slot.status();
    std::memset(slot->data(), static_cast<int>(i + 1), kPiece);
    auto ticket = device_->CopyToDeviceAsync(static_cast<uint8_t*>(buffer->data()) + i * kPiece,
                                             slot->data(), kPiece);
    ASSERT_TRUE(ticket.ok());
    tickets.push_back(*ticket);
    slots.push_back(*std::move(slot));
  }
  ASSERT_TRUE(device_->Synchronize().ok());
  for (HostBuffer& slot : slots) std::memset(slot.data(), 0xEE, kPiece);  // Safe now.
  for (const CopyTicket& t : tickets) EXPECT_TRUE(device_->Wait(t).ok());
  std::vector<uint8_t> back(kPiece * kPieces);
  ASSERT_TRUE(device_->CopyToHost(back.data(), buffer->data(), back.size()).ok());
  for (size_t i = 0; i < kPieces; ++i) {
    EXPECT_EQ(back[i * kPiece], i + 1) << i;
    EXPECT_EQ(back[(i + 1) * kPiece - 1], i + 1) << i;
  }
}

// CopyToHost and Materialize order themselves after copies in flight
// (cudaStreamWaitEvent on the copy streams): no Wait before them.
TEST_F(CudaTest, CopyToHostAndMaterializeSeeCopiesNotWaitedOn) {
  constexpr size_t kBytes = 64 * kMiB;
  auto buffer = device_->Allocate(kBytes);
  ASSERT_TRUE(buffer.ok());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    std::vector<HostBuffer> slots;
    constexpr size_t kPiece = 8 * kMiB;
    for (size_t off = 0; off < kBytes; off += kPiece) {
      auto slot = device_->AllocateStaging(kPiece);
      ASSERT_TRUE(slot.ok());
      auto* p = static_cast<uint8_t*>(slot->data());
      for (size_t i = 0; i < kPiece; ++i) p[i] = static_cast<uint8_t>((off + i) * 7 + round);
      ASSERT_TRUE(
          device_->CopyToDeviceAsync(static_cast<uint8_t*>(buffer->data()) + off, p, kPiece).ok());
      slots.push_back(*std::move(slot));
    }
    std::vector<uint8_t> back(kBytes);
    ASSERT_TRUE(device_->CopyToHost(back.data(), buffer->data(), kBytes).ok());
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += back[i] != static_cast<uint8_t>(i * 7 + round);
    EXPECT_EQ(wrong, 0u);
    // Again through Materialize (a device-to-device copy for a dense view).
    ASSERT_TRUE(device_->Synchronize().ok());
    for (size_t k = 0; k < slots.size(); ++k) std::memset(slots[k].data(), round + 100, kPiece);
    ASSERT_TRUE(device_->CopyToDeviceAsync(buffer->data(), slots[0].data(), kPiece).ok());
    const int64_t sizes[] = {static_cast<int64_t>(kPiece)}, strides[] = {1};
    ViewSpec view;
    view.sizes = sizes;
    view.strides = strides;
    auto dense = device_->Materialize(*buffer, view);
    ASSERT_TRUE(dense.ok()) << dense.status();
    std::vector<uint8_t> head(kPiece);
    ASSERT_TRUE(device_->CopyToHost(head.data(), dense->data(), kPiece).ok());
    EXPECT_EQ(head.front(), round + 100);
    EXPECT_EQ(head.back(), round + 100);
    ASSERT_TRUE(device_->Synchronize().ok());
  }
}

TEST_F(CudaTest, ZeroByteCopyToHostReturnsAtOnce) {
  EXPECT_TRUE(device_->CopyToHost(nullptr, nullptr, 0).ok());
}

TEST_F(CudaTest, ABatchOfCopiesIsOneTicket) {
  constexpr size_t kPieces = 100, kPiece = 4096;
  auto slot = device_->AllocateStaging(kPieces * kPiece);
  auto buffer = device_->Allocate(kPieces * kPiece);
  ASSERT_TRUE(slot.ok() && buffer.ok());
  auto* p = static_cast<uint8_t*>(slot->data());
  for (size_t i = 0; i < kPieces * kPiece; ++i) p[i] = static_cast<uint8_t>(i / kPiece);
  std::vector<CopyRequest> requests;
  for (size_t i = 0; i < kPieces; ++i) {
    // Reversed: piece i goes to the place of piece kPieces - 1 - i.
    requests.push_back(
        CopyRequest{.dst = static_cast<uint8_t*>(buffer->data()) + (kPieces - 1 - i) * kPiece,
                    .src = p + i * kPiece,
                    .nbytes = kPiece});
  }
  const DeviceStats before = device_->stats();
  auto tickets = device_->CopyManyToDeviceAsync(requests);
  ASSERT_TRUE(tickets.ok()) << tickets.status();
  EXPECT_EQ(tickets->size(), 1u) << "one event per batch";
  ASSERT_TRUE(device_->Wait(tickets->front()).ok());
  EXPECT_EQ(device_->stats().copies - before.copies, kPieces);
  std::vector<uint8_t> back(kPieces * kPiece);
  ASSERT_TRUE(device_->CopyToHost(back.data(), buffer->data(), back.size()).ok());
  for (size_t i = 0; i < kPieces; ++i) EXPECT_EQ(back[i * kPiece], kPieces - 1 - i) << i;
}

TEST_F(CudaTest, TheStagingCacheServesAnyLargeEnoughBlock) {
  device_->TrimStagingCache();
  const uint64_t allocations = device_->stats().staging_allocations;
  {
    auto a = device_->AllocateStaging(3 * kMiB + 5);
    ASSERT_TRUE(a.ok());
  }  // A 4 MiB class.
  EXPECT_EQ(device_->staging_cache_bytes(), 4 * kMiB);
  for (size_t n : {size_t{4} * kMiB, 2 * kMiB + 1, kMiB, size_t{100}}) {
    SCOPED_TRACE(n);
    auto b = device_->AllocateStaging(n);  // Other sizes, one block.
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->size(), n);
    EXPECT_EQ(device_->staging_cache_bytes(), 0u);
  }
  EXPECT_EQ(device_->stats().staging_allocations, allocations + 1);
  EXPECT_EQ(device_->stats().live_staging_bytes, 0u);
  device_->TrimStagingCache();
}

TEST_F(CudaTest, AllocateManyFailureNamesTheBuffer) {
  const std::vector<size_t> sizes = {kMiB, size_t{1} << 50, kMiB};
  const auto got = device_->AllocateMany(sizes);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  const auto payload = got.status().GetPayload(kAllocateManyIndexPayload);
  ASSERT_TRUE(payload.has_value()) << got.status();
  EXPECT_EQ(std::string(*payload), "1");
  EXPECT_THAT(got.status().message(), HasSubstr("buffer 1 of 3"));
  const std::vector<size_t> overflow = {100, ~size_t{0} - 10};
  const auto over = device_->AllocateMany(overflow);
  ASSERT_FALSE(over.ok());
  const auto over_payload = over.status().GetPayload(kAllocateManyIndexPayload);
  ASSERT_TRUE(over_payload.has_value());
  EXPECT_EQ(std::string(*over_payload), "1");
  EXPECT_EQ(device_->stats().live_allocations, 0u);
}

}  // namespace
}  // namespace ptd
