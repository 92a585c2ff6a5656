// Placement by a device budget and fqn patterns (runtime/loader/budget_split.h),
// the byte sizes ptd-load parses for --device-budget, and the loader's
// refusals that need no GPU.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/testing/fault_device.h"
#include "runtime/loader/budget_split.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::internal::BudgetPlacement;
using ::ptd::internal::CheckPlacement;
using ::ptd::internal::DescribeBytes;
using ::ptd::internal::DeviceReserveBytes;
using ::ptd::internal::MappedHostReservedBytes;
using ::ptd::internal::MatchesAny;
using ::ptd::internal::PlaceStorages;
using ::ptd::internal::ReserveMappedHost;
using ::ptd::testing::FakeCudaDevice;
using ::ptd::testing::TempDir;
using ::ptd::testing::WriteTestModel;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(PlacementTest, WithoutABudgetEverythingButTheHostFirstGoesToTheDevice) {
  const std::vector<uint64_t> sizes = {100, 200, 300};
  const BudgetPlacement p = PlaceStorages(sizes, {false, true, false}, std::nullopt);
  EXPECT_THAT(p.mapped, ElementsAre(false, true, false));
  EXPECT_EQ(p.device_storages, 2u);
  EXPECT_EQ(p.device_bytes, 256u + 512u);  // Each rounded up to 256.
  EXPECT_EQ(p.mapped_bytes, 256u);
}

TEST(PlacementTest, StoragesFillTheBudgetInOrderThenTheRestIsMapped) {
  const std::vector<uint64_t> sizes = {4 * kMiB, 4 * kMiB, 1, 4 * kMiB, 1};
  const BudgetPlacement p = PlaceStorages(sizes, std::vector<bool>(5, false), 8 * kMiB + 256);
  // The 1-byte storage takes 256 bytes: it fits; the next 4 MiB does not,
  // and from there everything is mapped (the last 1-byte storage too).
  EXPECT_THAT(p.mapped, ElementsAre(false, false, false, true, true));
  EXPECT_EQ(p.device_bytes, 8 * kMiB + 256);
  EXPECT_EQ(p.mapped_storages, 2u);
}

TEST(PlacementTest, AZeroBudgetMapsEverythingEvenEmptyStorages) {
  const std::vector<uint64_t> sizes = {0, 64, 0};
  const BudgetPlacement p = PlaceStorages(sizes, std::vector<bool>(3, false), 0);
  EXPECT_THAT(p.mapped, ElementsAre(true, true, true));
  EXPECT_EQ(p.device_storages, 0u);
  EXPECT_EQ(p.device_bytes, 0u);
}

TEST(PlacementTest, HostFirstStoragesDoNotCountAgainstTheBudget) {
  const std::vector<uint64_t> sizes = {4 * kMiB, 4 * kMiB, 4 * kMiB};
  const BudgetPlacement p = PlaceStorages(sizes, {true, false, false}, 8 * kMiB);
  EXPECT_THAT(p.mapped, ElementsAre(true, false, false));
  EXPECT_EQ(p.device_bytes, 8 * kMiB);
}

TEST(PlacementTest, WhatABudgetPlacesMustFitNotTheBudget) {
  // 40 MiB placed under a 96 MiB budget; 64 MiB of 80 free, less 1/64 of the
  // total (1.25 MiB): a budget is a cap, and what it places fits.
  const std::vector<uint64_t> sizes = {20 * kMiB, 20 * kMiB};
  const DeviceMemoryInfo info{.free_bytes = 64 * kMiB, .total_bytes = 80 * kMiB};
  EXPECT_EQ(DeviceReserveBytes(info), 80 * kMiB / 64);
  BudgetPlacement p = PlaceStorages(sizes, {false, false}, 96 * kMiB);
  EXPECT_TRUE(CheckPlacement(p, 96 * kMiB, info, "cuda:0").ok());
  // A budget far over the device (80G on an 80 GB card): the same.
  p = PlaceStorages(sizes, {false, false}, uint64_t{80} << 30);
  EXPECT_TRUE(CheckPlacement(p, uint64_t{80} << 30, info, "cuda:0").ok());
  // 64 MiB placed: over the 62.75 MiB usable by the reserve.
  p = PlaceStorages({32 * kMiB, 32 * kMiB}, {false, false}, 96 * kMiB);
  const absl::Status st = CheckPlacement(p, 96 * kMiB, info, "cuda:0");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("the device share under the budget 96 MiB (100663296 bytes), 64 MiB "
                        "(67108864 bytes) in 2 storage(s), is 1310720 bytes more than the "
                        "65798144 bytes usable on cuda:0: 67108864 free of 83886080, less a "
                        "reserve of 1310720; nothing was allocated"));
  // The reserve is at most 256 MiB.
  EXPECT_EQ(DeviceReserveBytes(DeviceMemoryInfo{.total_bytes = uint64_t{80} << 30}), 256 * kMiB);
}

// The defect: two loads at once each counted on all of MemAvailable (which
// shows neither until it has pinned). The process holds one counter.
TEST(PlacementTest, LoadsAtOnceShareThePinnableMemory) {
  BudgetPlacement p;
  p.mapped_bytes = 6 * kMiB;
  p.mapped_storages = 2;
  const DeviceMemoryInfo info{.free_bytes = 64 * kMiB,
                              .total_bytes = 64 * kMiB,
                              .mappable_bytes = 10 * kMiB,
                              .mappable_source = "MemAvailable in /proc/meminfo"};
  ASSERT_EQ(MappedHostReservedBytes(), 0u);
  auto first = ReserveMappedHost(p, 0, info, "cuda:0");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(MappedHostReservedBytes(), 6 * kMiB);
  auto second = ReserveMappedHost(p, 0, info, "cuda:0");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("is 2097152 bytes more than the 4194304 bytes of host memory that can be "
                        "pinned for cuda:0 (MemAvailable in /proc/meminfo, less 6291456 bytes "
                        "that other loads of this process are about to pin)"));
  EXPECT_EQ(MappedHostReservedBytes(), 6 * kMiB);
  first->reset();  // The first load has allocated.
  EXPECT_EQ(MappedHostReservedBytes(), 0u);
  auto third = ReserveMappedHost(p, 0, info, "cuda:0");
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(PlacementTest, AMappedShareOverThePinnableMemoryNamesTheShortfall) {
  BudgetPlacement p;
  p.mapped_bytes = 10 * kMiB;
  p.mapped_storages = 3;
  DeviceMemoryInfo info{.free_bytes = 64 * kMiB,
                        .mappable_bytes = 8 * kMiB,
                        .mappable_source = "MemAvailable in /proc/meminfo"};
  const absl::Status st = CheckPlacement(p, std::nullopt, info, "cuda:1");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("10 MiB (10485760 bytes) in 3 storage(s), is 2097152 bytes more than the "
                        "8388608 bytes of host memory that can be pinned for cuda:1 (MemAvailable "
                        "in /proc/meminfo)"));
  info.mappable_bytes.reset();  // Unknown: no check.
  EXPECT_TRUE(CheckPlacement(p, std::nullopt, info, "cuda:1").ok());
}

TEST(PlacementTest, PatternsAreGlobs) {
  const std::vector<std::string> patterns = {"tok_embeddings.*", "layers.?.norm"};
  EXPECT_TRUE(MatchesAny(patterns, "tok_embeddings.weight"));
  EXPECT_TRUE(MatchesAny(patterns, "layers.3.norm"));
  EXPECT_FALSE(MatchesAny(patterns, "layers.13.norm"));
  EXPECT_FALSE(MatchesAny(patterns, "output.tok_embeddings.weight"));
  EXPECT_FALSE(MatchesAny({}, "anything"));
  EXPECT_TRUE(MatchesAny({"*"}, "a/b.c"));
}

TEST(PlacementTest, DescribeBytes) {
  EXPECT_EQ(DescribeBytes(0), "0 bytes");
  EXPECT_EQ(DescribeBytes(1), "1 byte");
  EXPECT_EQ(DescribeBytes(1000), "1000 bytes");
  EXPECT_EQ(DescribeBytes(48 * kMiB), "48 MiB (50331648 bytes)");
  EXPECT_EQ(DescribeBytes(1536 * kMiB), "1.5 GiB (1610612736 bytes)");
}

TEST(ByteSizeTest, ParsesBinarySuffixes) {
  uint64_t n = 0;
  ASSERT_TRUE(cli::ParseByteSize("48M", &n));
  EXPECT_EQ(n, 48 * kMiB);
  ASSERT_TRUE(cli::ParseByteSize("1k", &n));
  EXPECT_EQ(n, 1024u);
  ASSERT_TRUE(cli::ParseByteSize("2G", &n));
  EXPECT_EQ(n, uint64_t{2} << 30);
  ASSERT_TRUE(cli::ParseByteSize("1T", &n));
  EXPECT_EQ(n, uint64_t{1} << 40);
  ASSERT_TRUE(cli::ParseByteSize("0", &n));
  EXPECT_EQ(n, 0u);
  ASSERT_TRUE(cli::ParseByteSize("18446744073709551615", &n));
  EXPECT_EQ(n, ~uint64_t{0});
  for (const char* bad : {"", "M", "-1M", "+4", "1.5G", "48MB", "48MiB", " 48M", "48 M", "12X",
                          "16777216T", "18446744073709551616", "0x10"}) {
    EXPECT_FALSE(cli::ParseByteSize(bad, &n)) << bad;
  }
}

// The loader's refusals, without a GPU.
TEST(LoaderPlacementTest, ABudgetOnTheHostDeviceIsInvalidArgument) {
  TempDir dir;
  const auto model = WriteTestModel(dir.path(), {4096});
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  for (const LoadOptions& lo :
       {LoadOptions{.device_budget_bytes = 0}, LoadOptions{.host_fqns = {"w*"}}}) {
    auto w = LoadWeights(paths, std::make_shared<HostDevice>(), lo);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << w.status();
    EXPECT_THAT(std::string(w.status().message()), HasSubstr("is the host"));
  }
}

TEST(LoaderPlacementTest, ADeviceWithoutMemoryInfoCannotTakeABudget) {
  TempDir dir;
  const auto model = WriteTestModel(dir.path(), {4096});
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  auto dev = std::make_shared<FaultDevice>(std::make_shared<FakeCudaDevice>());
  auto w = LoadWeights(paths, dev, LoadOptions{.device_budget_bytes = kMiB});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented) << w.status();
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("placing storages by a device budget"));
  EXPECT_EQ(dev->counts().allocations, 0u);
  // Without a budget or a pattern that matches, the load is as before.
  auto plain = LoadWeights(paths, dev, LoadOptions{.host_fqns = {"nothing.*"}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->storages()[0].residency, Residency::kDevice);
  EXPECT_EQ(plain->weights()[0].residency, Residency::kDevice);
  EXPECT_EQ(plain->stats().placed_device.storages, 1u);
  EXPECT_EQ(plain->stats().placed_device.bytes, 4096u);
}

TEST(LoaderPlacementTest, HostLoadsReportHostResidency) {
  TempDir dir;
  const auto model = WriteTestModel(dir.path(), {4096, 128}, /*with_cpu_weight=*/true);
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  auto host = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(host.ok()) << host.status();
  for (const LoadedWeight& w : host->weights()) EXPECT_EQ(w.residency, Residency::kHost);
  EXPECT_EQ(host->stats().placed_host.storages, 3u);
  // On a GPU the CPU weight stays in plain host memory.
  auto fake = LoadWeights(paths, std::make_shared<FakeCudaDevice>());
  ASSERT_TRUE(fake.ok()) << fake.status();
  EXPECT_EQ(fake->Find("cpu.table")->residency, Residency::kHost);
  EXPECT_EQ(fake->Find("w0")->residency, Residency::kDevice);
  EXPECT_EQ(fake->stats().placed_host.storages, 1u);
  EXPECT_EQ(fake->stats().placed_device.storages, 2u);
  EXPECT_EQ(ResidencyName(Residency::kMappedHost), "mapped_host");
}

}  // namespace
}  // namespace ptd
