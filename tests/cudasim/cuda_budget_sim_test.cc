// Weights larger than device memory on the simulator (label "cudasim"):
// LoadOptions::device_budget_bytes and host_fqns put part of a model in
// page-locked host memory mapped for the GPU, which the kernels read
// directly. A 200 MiB model on a 64 MiB device.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/cuda_device.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "ptd/testing/fault_device.h"
#include "ptd/view_materialize.h"
#include "tests/cudasim/cudasim.h"
#include "tests/cudasim/sim_devices.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCase;
using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::ConformanceRoutes;
using ::ptd::testing::OkConformanceCases;
using ::ptd::testing::RunCommand;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kCapacity = 64 * kMiB;
constexpr size_t kStorages = 50;  // 50 x 4 MiB = 200 MiB.

// sha256 of `n` bytes at `p`, read through the pointer: directly for host
// memory (mapped included), through CopyToHost for device memory.
std::string DigestThroughPointer(CudaDevice& gpu, const void* p, size_t n, bool host_readable) {
  if (host_readable) return Sha256Hex(absl::MakeConstSpan(static_cast<const uint8_t*>(p), n));
  std::vector<uint8_t> back(n);
  const absl::Status st = gpu.CopyToHost(back.data(), p, n);
  if (!st.ok()) return std::string(st.message());
  return Sha256Hex(back);
}

// The 200 MiB model, written once, and its weights' digests from a host load.
class CudaBudgetSimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ =
        new TestModel(WriteTestModel(dir_->path(), std::vector<uint64_t>(kStorages, 4 * kMiB)));
    auto host = LoadWeights(paths(), std::make_shared<HostDevice>());
    ASSERT_TRUE(host.ok()) << host.status();
    want_ = new std::vector<std::string>();
    for (const std::string& fqn : model_->fqns) {
      auto d = DigestLoadedWeight(*host, *host->Find(fqn));
      ASSERT_TRUE(d.ok()) << d.status();
      want_->push_back(*d);
    }
  }
  static void TearDownTestSuite() {
    delete want_;
    delete model_;
    delete dir_;
  }
  static BundlePaths paths() {
    return BundlePaths{.ptd = model_->ptd, .manifest = model_->manifest};
  }

  static TempDir* dir_;
  static TestModel* model_;
  static std::vector<std::string>* want_;
};
TempDir* CudaBudgetSimTest::dir_ = nullptr;
TestModel* CudaBudgetSimTest::model_ = nullptr;
std::vector<std::string>* CudaBudgetSimTest::want_ = nullptr;

TEST_F(CudaBudgetSimTest, A48MiBBudgetLoads200MiBOnA64MiBDevice) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  {
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto w = LoadWeights(paths(), *gpu, LoadOptions{.device_budget_bytes = 48 * kMiB});
    ASSERT_TRUE(w.ok()) << w.status();
    // 12 storages of 4 MiB fill the budget; the other 38 are mapped.
    const LoadStats& st = w->stats();
    EXPECT_EQ(st.placed_device.storages, 12u);
    EXPECT_EQ(st.placed_device.bytes, 48 * kMiB);
    EXPECT_EQ(st.placed_mapped_host.storages, 38u);
    EXPECT_EQ(st.placed_mapped_host.bytes, 38 * 4 * kMiB);
    EXPECT_EQ(st.placed_host.storages, 0u);
    EXPECT_EQ(st.placed(Residency::kMappedHost).storages, 38u);
    EXPECT_LE(cudasim::DeviceBytesInUse(0), 48 * kMiB);
    EXPECT_GE(cudasim::PinnedBytesInUse(), 38 * 4 * kMiB);
    EXPECT_EQ((*gpu)->stats().mapped_allocations, 1u);
    for (size_t i = 0; i < kStorages; ++i) {
      const LoadedWeight* lw = w->Find(model_->fqns[i]);
      ASSERT_NE(lw, nullptr);
      const Residency want = i < 12 ? Residency::kDevice : Residency::kMappedHost;
      EXPECT_EQ(lw->residency, want) << lw->fqn;
      EXPECT_EQ(w->storage(*lw).residency, want) << lw->fqn;
      EXPECT_EQ(w->storage(*lw).host_accessible, want == Residency::kMappedHost);
      EXPECT_EQ(lw->device, DeviceKind::kCuda);
      EXPECT_EQ(DigestThroughPointer(**gpu, lw->data, 4 * kMiB, want == Residency::kMappedHost),
                (*want_)[i])
          << lw->fqn;
      auto d = DigestLoadedWeight(*w, *lw);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, (*want_)[i]) << lw->fqn;
    }
    // A weight in mapped memory materialized on the GPU: a device-to-device
    // copy (the whole view), the transpose kernel and the gather kernel,
    // each reading mapped memory.
    const LoadedWeight* mapped = w->Find(model_->fqns[40]);
    const LoadedStorage& s = w->storage(*mapped);
    ASSERT_EQ(s.residency, Residency::kMappedHost);
    const std::vector<int64_t> whole_sizes = {int64_t{1} << 20}, whole_strides = {1};
    const std::vector<int64_t> t_sizes = {512, 256}, t_strides = {1, 512};
    const std::vector<int64_t> g_sizes = {64, 3, 5}, g_strides = {1000, 7, 2};
    const ViewSpec views[] = {
        {.element_size = 4, .storage_offset = 0, .sizes = whole_sizes, .strides = whole_strides},
        {.element_size = 4, .storage_offset = 3, .sizes = t_sizes, .strides = t_strides},
        {.element_size = 2, .storage_offset = 11, .sizes = g_sizes, .strides = g_strides}};
    for (const ViewSpec& view : views) {
      auto plan = PlanMaterialize(view, s.nbytes);
      ASSERT_TRUE(plan.ok()) << plan.status();
      std::vector<uint8_t> expected(plan->output_nbytes);
      ASSERT_TRUE(MaterializeOnHost(
                      absl::MakeConstSpan(static_cast<const uint8_t*>(s.buffer.data()), s.nbytes),
                      view, absl::MakeSpan(expected))
                      .ok());
      auto dense = (*gpu)->Materialize(s.buffer, view);
      ASSERT_TRUE(dense.ok()) << dense.status();
      std::vector<uint8_t> got(plan->output_nbytes);
      ASSERT_TRUE((*gpu)->CopyToHost(got.data(), dense->data(), got.size()).ok());
      EXPECT_EQ(got, expected) << view.sizes.size() << "-d view";
      // MaterializeInto a reused device buffer reads it the same way.
      ASSERT_TRUE((*gpu)->MaterializeInto(s.buffer, view, *dense).ok());
      ASSERT_TRUE((*gpu)->CopyToHost(got.data(), dense->data(), got.size()).ok());
      EXPECT_EQ(got, expected);
    }
  }
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
}

// The mapped share in blocks of LoadOptions::mapped_block_bytes: 152 MiB
// of mapped storages in blocks of at most 16 MiB (four 4 MiB storages
// each) is ten pinned blocks, none holding part of a storage, each pinned
// while the one before is read; and the device's part runs beside it.
TEST_F(CudaBudgetSimTest, TheMappedSharePinsInBlocksWhileTheBlockBeforeIsRead) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  {
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const uint64_t host_allocs = cudasim::CallCount("cudaHostAlloc");
    LoadOptions o{.device_budget_bytes = 48 * kMiB};
    o.mapped_block_bytes = 16 * kMiB;
    auto w = LoadWeights(paths(), *gpu, o);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().placed_mapped_host.storages, 38u);
    // 38 storages, four to a block: ten blocks, ten cudaHostAlloc calls
    // (beside the staging ring's).
    EXPECT_EQ((*gpu)->stats().mapped_allocations, 10u);
    EXPECT_GE(cudasim::CallCount("cudaHostAlloc") - host_allocs, 10u);
    // Each storage's first and last byte are pinned host memory (the
    // simulator knows every pinned allocation).
    for (size_t i = 12; i < kStorages; ++i) {
      const LoadedStorage& s = w->storage(*w->Find(model_->fqns[i]));
      ASSERT_EQ(s.residency, Residency::kMappedHost);
      cudaPointerAttributes first{}, last{};
      ASSERT_EQ(cudaPointerGetAttributes(&first, s.buffer.data()), cudaSuccess);
      ASSERT_EQ(cudaPointerGetAttributes(
                    &last, static_cast<const uint8_t*>(s.buffer.data()) + s.nbytes - 1),
                cudaSuccess);
      EXPECT_EQ(first.type, cudaMemoryTypeHost);
      EXPECT_EQ(last.type, cudaMemoryTypeHost);
    }
    for (size_t i = 0; i < kStorages; ++i) {
      auto d = DigestLoadedWeight(*w, *w->Find(model_->fqns[i]));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, (*want_)[i]) << model_->fqns[i];
    }
  }
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
}

// A block that cannot be pinned fails the load, naming its storage, and
// frees every block pinned before it and the device's part.
TEST_F(CudaBudgetSimTest, ABlockThatCannotBePinnedFailsTheLoadAndFreesTheRest) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  {
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    LoadOptions o{.device_budget_bytes = 0};
    o.mapped_block_bytes = 64 * kMiB;
    o.ring_slots = 2;
    // The third block's cudaHostAlloc fails (the first two pinned fine).
    cudasim::FailNthCall("cudaHostAlloc", 3, cudaErrorMemoryAllocation);
    auto w = LoadWeights(paths(), *gpu, o);
    cudasim::ClearFaults();
    ASSERT_FALSE(w.ok());
    EXPECT_THAT(std::string(w.status().message()), HasSubstr("allocate mapped host memory for"));
  }
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
}

TEST_F(CudaBudgetSimTest, ABudgetOverTheFreeMemoryFailsBeforeAnyAllocation) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const uint64_t mallocs = cudasim::CallCount("cudaMalloc");
  const uint64_t host_allocs = cudasim::CallCount("cudaHostAlloc");
  auto w = LoadWeights(paths(), *gpu, LoadOptions{.device_budget_bytes = 96 * kMiB});
  ASSERT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
  const std::string msg(w.status().message());
  // 24 storages (96 MiB) placed, 55 MiB usable: 56 MiB free (the simulated
  // context holds 8 of the 64) less a reserve of 1/64 of the total.
  EXPECT_THAT(msg, HasSubstr("the device share under the budget 96 MiB (100663296 bytes), 96 MiB "
                             "(100663296 bytes) in 24 storage(s), is 42991616 bytes more than the "
                             "57671680 bytes usable on cuda:0 (cudasim, sm_90): 58720256 free of "
                             "67108864, less a reserve of 1048576"));
  EXPECT_EQ(cudasim::CallCount("cudaMalloc"), mallocs);
  EXPECT_EQ(cudasim::CallCount("cudaHostAlloc"), host_allocs);
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
}

// The defect: the check compared the budget itself with the free memory,
// so --device-budget 80G failed on an 80 GB card (whose free memory is
// below 80 GB) even for a small model.
TEST_F(CudaBudgetSimTest, ABudgetOverTheDeviceLoadsAModelThatFits) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // w0-w9 (40 MiB) in device memory, w10-w49 in mapped host memory by
  // host_fqns, under a budget of 1 TiB.
  auto w = LoadWeights(paths(), *gpu,
                       LoadOptions{.device_budget_bytes = uint64_t{1} << 40,
                                   .host_fqns = {"w1?", "w2?", "w3?", "w4?"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().placed(Residency::kDevice).storages, 10u);
  EXPECT_EQ(w->stats().placed(Residency::kMappedHost).storages, 40u);
  for (size_t i = 0; i < kStorages; ++i) {
    auto d = DigestLoadedWeight(*w, *w->Find(model_->fqns[i]));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, (*want_)[i]) << model_->fqns[i];
  }
}

// The defect: small storages bound for mapped host memory were read into
// scratch memory and copied (the mapped arena padded each to 256 B, unlike
// the file). The mapped arena now lies as the file does: straight in.
TEST(CudaBudgetSmallSimTest, SmallStoragesReadStraightIntoMappedMemory) {
  TempDir dir;
  const TestModel model = WriteTestModel(dir.path(), std::vector<uint64_t>(4096, 1000));
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto w = LoadWeights(paths, *gpu, LoadOptions{.device_budget_bytes = 0});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().placed(Residency::kMappedHost).storages, 4096u);
  EXPECT_EQ(w->stats().bytes_via_scratch, 0u);
  EXPECT_LT(w->stats().reads, 64u);  // Packed reads, straight into the arena.
  auto host = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(host.ok());
  for (size_t i = 0; i < model.fqns.size(); i += 41) {
    const LoadedWeight* lw = w->Find(model.fqns[i]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(lw->data) % 64, 0u);
    EXPECT_EQ(*DigestLoadedWeight(*w, *lw), *DigestLoadedWeight(*host, *host->Find(model.fqns[i])))
        << model.fqns[i];
  }
}

// The defect: CopyToHost named the direction (device to host), which a
// storage in mapped host memory is not; the runtime refused the copy.
TEST_F(CudaBudgetSimTest, CopyToHostReadsAMappedStorage) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto w = LoadWeights(paths(), *gpu, LoadOptions{.device_budget_bytes = 0});
  ASSERT_TRUE(w.ok()) << w.status();
  const LoadedWeight* lw = w->Find(model_->fqns[3]);
  ASSERT_NE(lw, nullptr);
  ASSERT_EQ(lw->residency, Residency::kMappedHost);
  // The test model's weights are whole, contiguous storages.
  uint64_t nbytes = lw->element_size;
  for (int64_t d : lw->sizes) nbytes *= static_cast<uint64_t>(d);
  ASSERT_EQ(nbytes, 4 * kMiB);
  std::vector<uint8_t> back(nbytes);
  ASSERT_TRUE((*gpu)->CopyToHost(back.data(), lw->data, back.size()).ok());
  EXPECT_EQ(Sha256Hex(back), (*want_)[3]);
}

TEST_F(CudaBudgetSimTest, WithoutABudgetTheLoadRunsOutOfMemoryCleanly) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const uint64_t mem_info = cudasim::CallCount("cudaMemGetInfo");
  auto w = LoadWeights(paths(), *gpu);
  ASSERT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("allocate on cuda:0"));
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
  EXPECT_EQ((*gpu)->stats().live_bytes, 0u);
  EXPECT_EQ((*gpu)->stats().mapped_allocations, 0u);
  // No placement ran: the only cudaMemGetInfo is the failed arena's note.
  EXPECT_LE(cudasim::CallCount("cudaMemGetInfo") - mem_info, 1u);
}

TEST_F(CudaBudgetSimTest, AMappedShareOverThePinnableMemoryFailsBeforeAnyAllocation) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // The host says 100 MiB can be pinned; 152 MiB would be.
  auto dev = std::make_shared<FaultDevice>(
      *gpu, FaultPlan{.memory_info = DeviceMemoryInfo{.free_bytes = kCapacity,
                                                      .total_bytes = kCapacity,
                                                      .mappable_bytes = 100 * kMiB,
                                                      .mappable_source = "a test's limit"}});
  const uint64_t host_allocs = cudasim::CallCount("cudaHostAlloc");
  auto w = LoadWeights(paths(), dev, LoadOptions{.device_budget_bytes = 48 * kMiB});
  ASSERT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("152 MiB (159383552 bytes) in 38 storage(s), is 54525952 bytes more "
                        "than the 104857600 bytes"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("(a test's limit)"));
  EXPECT_EQ(cudasim::CallCount("cudaHostAlloc"), host_allocs);
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), 0u);
}

// The real bound: MemAvailable, reported with the device's free memory.
TEST_F(CudaBudgetSimTest, MemoryInfoReportsFreeDeviceMemoryAndMemAvailable) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto info = (*gpu)->MemoryInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  // The simulated context holds an eighth of so small a device.
  EXPECT_EQ(info->free_bytes, kCapacity - kCapacity / 8);
  EXPECT_EQ(info->total_bytes, kCapacity);
  ASSERT_TRUE(info->mappable_bytes.has_value());
  EXPECT_GT(*info->mappable_bytes, 0u);
  // MemAvailable, or the cgroup's room where that is less, less a reserve.
  EXPECT_THAT(info->mappable_source,
              ::testing::MatchesRegex("(MemAvailable in /proc/meminfo|memory\\.(max|limit_in_"
                                      "bytes) less .*), less a reserve of [0-9]+ bytes"));
}

TEST_F(CudaBudgetSimTest, HostFqnPatternsGoToMappedMemoryBeforeTheBudgetIsCounted) {
  cudasim::SimDevices sim(1, kCapacity);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto w = LoadWeights(paths(), *gpu,
                       LoadOptions{.device_budget_bytes = 48 * kMiB, .host_fqns = {"w1?"}});
  ASSERT_TRUE(w.ok()) << w.status();
  // w10..w19 first; then w0..w9, w20, w21 fill the budget.
  for (size_t i = 0; i < kStorages; ++i) {
    const bool device = i < 10 || i == 20 || i == 21;
    const LoadedWeight* lw = w->Find(model_->fqns[i]);
    EXPECT_EQ(lw->residency, device ? Residency::kDevice : Residency::kMappedHost) << lw->fqn;
    auto d = DigestLoadedWeight(*w, *lw);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, (*want_)[i]);
  }
  EXPECT_EQ(w->stats().placed_device.storages, 12u);
  EXPECT_EQ(w->stats().placed_mapped_host.storages, 38u);
}

// A storage four views share (k02): one match places it, once, and every
// view on it reads mapped memory, the transposed one through the kernel.
TEST(CudaBudgetConformanceTest, ASharedStorageIsPlacedOnce) {
  const json& tc = ConformanceCase("k02_one_storage_key_many_views");
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto w = LoadWeights(
      BundlePaths{.ptd = ConformancePath(tc["ptd"]), .manifest = ConformancePath(tc["manifest"])},
      *gpu, LoadOptions{.host_fqns = {"layers.0.attn.k"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->storages().size(), 1u);
  EXPECT_EQ(w->stats().placed_mapped_host.storages, 1u);
  EXPECT_EQ(w->stats().placed_device.storages, 0u);
  EXPECT_EQ((*gpu)->stats().allocations, 0u) << "no device arena";
  for (const auto& want : tc["weights"]) {
    const LoadedWeight* lw = w->Find(want["fqn"].get<std::string>());
    ASSERT_NE(lw, nullptr);
    EXPECT_EQ(lw->residency, Residency::kMappedHost);
    auto dense = (*gpu)->Materialize(w->storage(*lw).buffer, lw->view());
    ASSERT_TRUE(dense.ok()) << dense.status();
    EXPECT_EQ(DigestThroughPointer(**gpu, dense->data(), dense->size(), false),
              want["sha256"].get<std::string>())
        << lw->fqn;
  }
}

class CudaBudgetConformanceCaseTest : public ::testing::TestWithParam<std::string> {};

// Budget 0 (every storage in mapped memory) and none (every storage on the
// device): the digests of cases.json either way, gathered from the loaded
// memory and from the dense copy made on the GPU.
TEST_P(CudaBudgetConformanceCaseTest, BudgetZeroAndUnlimitedGiveTheSameDigests) {
  const json& tc = ConformanceCase(GetParam());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (const BundlePaths& paths : ConformanceRoutes(tc)) {
    for (const std::optional<uint64_t> budget :
         {std::optional<uint64_t>(0), std::optional<uint64_t>()}) {
      SCOPED_TRACE(absl::StrCat(paths.pte        ? "pte"
                                : paths.manifest ? "manifest"
                                                 : "container",
                                budget ? ", budget 0" : ", no budget"));
      auto w = LoadWeights(paths, *gpu, LoadOptions{.device_budget_bytes = budget});
      ASSERT_TRUE(w.ok()) << w.status();
      if (budget) {
        EXPECT_EQ(w->stats().placed_device.storages, 0u);
      } else {
        EXPECT_EQ(w->stats().placed_mapped_host.storages, 0u);
      }
      for (const LoadedStorage& s : w->storages()) {
        if (s.device == DeviceKind::kHost) {
          EXPECT_EQ(s.residency, Residency::kHost);
        } else {
          EXPECT_EQ(s.residency, budget ? Residency::kMappedHost : Residency::kDevice);
        }
      }
      if (tc.contains("named_data")) {
        for (const auto& nd : tc["named_data"]) {
          const LoadedStorage* s = w->FindStorage(nd["key"].get<std::string>());
          ASSERT_NE(s, nullptr);
          auto d = DigestLoadedStorage(*w, *s);
          ASSERT_TRUE(d.ok()) << d.status();
          EXPECT_EQ(*d, nd["sha256"].get<std::string>()) << nd["key"];
        }
      }
      if (!tc.contains("weights")) continue;
      for (const auto& want : tc["weights"]) {
        if (want["sha256"].is_null()) continue;
        const LoadedWeight* lw = w->Find(want["fqn"].get<std::string>());
        ASSERT_NE(lw, nullptr) << want["fqn"];
        auto d = DigestLoadedWeight(*w, *lw);
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_EQ(*d, want["sha256"].get<std::string>()) << lw->fqn;
        if (lw->residency == Residency::kHost) continue;
        auto dense = (*gpu)->Materialize(w->storage(*lw).buffer, lw->view());
        ASSERT_TRUE(dense.ok()) << lw->fqn << ": " << dense.status();
        EXPECT_EQ(DigestThroughPointer(**gpu, dense->data(), dense->size(), false),
                  want["sha256"].get<std::string>())
            << lw->fqn << " (materialized)";
      }
    }
  }
  EXPECT_EQ((*gpu)->stats().live_bytes, 0u);
  EXPECT_EQ((*gpu)->stats().live_mapped_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Upstream, CudaBudgetConformanceCaseTest,
                         ::testing::ValuesIn(OkConformanceCases()),
                         [](const auto& p) { return p.param; });

// ptd-load-cudasim on the 200 MiB model and a 64 MiB device.
std::string LoadCommand(const std::string& args) {
  return "PTD_CUDASIM_CAPACITY=64M timeout 300 " + std::string(PTD_LOAD_BINARY) +
         " --device cuda:0 " + args;
}

TEST_F(CudaBudgetSimTest, PtdLoadWithA48MiBBudgetDigestsEveryWeight) {
  const auto run = RunCommand(LoadCommand("--device-budget 48M --digest --json --manifest " +
                                          model_->manifest + " " + model_->ptd));
  ASSERT_EQ(run.exit_code, 0) << run.out.substr(0, 2000);
  const json j = json::parse(run.out);
  EXPECT_EQ(j["load"]["device_budget"], 48 * kMiB);
  // The 12 device storages' copies, in cudaMemcpyAsync calls (the mapped
  // ones are read in place: no copy).
  EXPECT_EQ(j["load"]["copies"], 12);
  EXPECT_GE(j["load"]["copy_calls"], 1);
  EXPECT_LE(j["load"]["copy_calls"], 12);
  EXPECT_EQ(j["load"]["placement"]["device"]["storages"], 12);
  EXPECT_EQ(j["load"]["placement"]["device"]["bytes"], 48 * kMiB);
  EXPECT_EQ(j["load"]["placement"]["mapped_host"]["storages"], 38);
  EXPECT_EQ(j["load"]["placement"]["mapped_host"]["bytes"], 38 * 4 * kMiB);
  EXPECT_EQ(j["load"]["placement"]["host"]["storages"], 0);
  EXPECT_EQ(j["materialized"]["checked"], kStorages);
  EXPECT_EQ(j["materialized"]["ok"], true);
  size_t seen = 0;
  for (const auto& wj : j["manifests"][0]["weights"]) {
    const std::string fqn = wj["fqn"];
    const size_t i = std::stoul(fqn.substr(1));
    EXPECT_EQ(wj["sha256"], (*want_)[i]) << fqn;
    EXPECT_EQ(wj["materialized_sha256"], (*want_)[i]) << fqn;
    EXPECT_EQ(wj["residency"], i < 12 ? "device" : "mapped_host") << fqn;
    ++seen;
  }
  EXPECT_EQ(seen, kStorages);
}

TEST_F(CudaBudgetSimTest, PtdLoadNamesTheShortfallAndTheOutOfMemory) {
  const std::string files = " --manifest " + model_->manifest + " " + model_->ptd + " 2>&1";
  auto run = RunCommand(LoadCommand("--device-budget 96M" + files));
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_THAT(run.out,
              HasSubstr("is 42991616 bytes more than the 57671680 bytes usable on cuda:0"));
  // A budget over the device's memory is a cap: a model that fits loads.
  run = RunCommand(LoadCommand("--device-budget 1T --json " +
                               ConformancePath("files/c01_layouts_and_shared_segment.ptd") +
                               " 2>&1"));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  // Text report with a budget: the placement line.
  run = RunCommand(LoadCommand("--device-budget 48M --host-fqn 'w4?'" + files));
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("placed (device budget 50331648 bytes): device 12 storages, "
                                 "50331648 bytes; mapped_host 38 storages, 159383552 bytes; "
                                 "host 0 storages, 0 bytes"));
  run = RunCommand(LoadCommand(files));
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_THAT(run.out, HasSubstr("out of memory"));
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("placed")));
}

}  // namespace
}  // namespace ptd
