// The loader onto a real GPU (LoadWeights with a CudaDevice): every ok
// conformance case lands with the expected digests, read back from device
// memory both as gathered views and as dense copies made on the GPU
// (CudaDevice::Materialize); the Nth allocation, staging allocation, copy or
// wait failing gives a clean error naming the storage and the phase and
// leaves nothing allocated; staging is reused across loads; a multi-GiB load
// holds no more host memory than its staging ring.
//
// Every test here needs a GPU and skips without one (label "gpu"); files are
// only generated after that check, so a skipped run costs nothing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/cuda_device.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "ptd/testing/fault_device.h"
#include "ptd/view_materialize.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"
#ifdef PTD_CUDASIM
#include "tests/cudasim/cudasim.h"
#endif

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCase;
using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::ConformanceRoutes;
using ::ptd::testing::ExpectLoadedAsCase;
using ::ptd::testing::OkConformanceCases;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * kKiB;

// sha256 of `buffer`'s bytes, read back from the GPU in pieces of at most
// 16 MiB.
absl::StatusOr<std::string> DeviceDigest(CudaDevice& gpu, const DeviceBuffer& buffer) {
  Sha256 sha;
  std::vector<uint8_t> piece(std::min<size_t>(buffer.size(), 16 * kMiB));
  for (size_t done = 0; done < buffer.size();) {
    const size_t n = std::min(piece.size(), buffer.size() - done);
    const absl::Status st =
        gpu.CopyToHost(piece.data(), static_cast<const uint8_t*>(buffer.data()) + done, n);
    if (!st.ok()) return st;
    sha.Update(absl::MakeConstSpan(piece.data(), n));
    done += n;
  }
  return sha.HexDigest();
}

// sha256 of the dense copy of `w`: made on the GPU (CudaDevice::Materialize)
// and read back, for a weight in device memory; MaterializeOnHost for one in
// host memory (CPU weights).
absl::StatusOr<std::string> MaterializedDigest(CudaDevice& gpu, const LoadedWeights& weights,
                                               const LoadedWeight& w) {
  const LoadedStorage& s = weights.storage(w);
  if (s.host_accessible) {
    auto plan = PlanMaterialize(w.view(), s.nbytes);
    if (!plan.ok()) return plan.status();
    std::vector<uint8_t> out(plan->output_nbytes);
    const absl::Status st = MaterializeOnHost(
        absl::MakeConstSpan(static_cast<const uint8_t*>(s.buffer.data()), s.nbytes), w.view(),
        absl::MakeSpan(out));
    if (!st.ok()) return st;
    return Sha256Hex(out);
  }
  auto dense = gpu.Materialize(s.buffer, w.view());
  if (!dense.ok()) return dense.status();
  return DeviceDigest(gpu, *dense);
}

class CudaLoaderConformanceTest : public CudaTest,
                                  public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaLoaderConformanceTest, ViewsAndDenseCopiesHaveExpectedDigests) {
  const json& tc = ConformanceCase(GetParam());
  for (const BundlePaths& paths : ConformanceRoutes(tc)) {
    SCOPED_TRACE(paths.pte ? "pte" : paths.manifest ? "manifest" : "container");
    const DeviceStats before = device_->stats();
    {
      auto w = LoadWeights(paths, device_);
      ASSERT_TRUE(w.ok()) << w.status();
      // One arena (one cudaMalloc) holds every storage on the GPU (a
      // scattering staging ring's device scratch is gone with the transfer).
      EXPECT_LE(device_->stats().live_allocations - before.live_allocations, 1u);
      // Every storage and weight as cases.json says, read back from the GPU.
      for (const std::string& fqn : ExpectLoadedAsCase(tc, *w, DeviceKind::kCuda)) {
        // And each weight's dense copy made on the GPU.
        auto dense = MaterializedDigest(*device_, *w, *w->Find(fqn));
        ASSERT_TRUE(dense.ok()) << fqn << ": " << dense.status();
        auto gathered = DigestLoadedWeight(*w, *w->Find(fqn));
        ASSERT_TRUE(gathered.ok()) << fqn << ": " << gathered.status();
        EXPECT_EQ(*dense, *gathered) << fqn << " (materialized)";
      }
      // Every storage on the GPU at least 64 B aligned (AOTInductor's
      // constant alignment; Triton and TMA kernels assume 16).
      for (const LoadedStorage& s : w->storages()) {
        if (s.residency != Residency::kDevice) continue;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(s.buffer.data()) % 64, 0u)
            << (s.keys.empty() ? std::string_view("?") : s.keys.front());
      }
      // A container's keys all go to the GPU.
      for (const auto& nd : tc.value("named_data", json::array())) {
        const LoadedStorage* s = w->FindStorage(nd["key"].get<std::string>());
        ASSERT_NE(s, nullptr) << nd["key"];
        EXPECT_EQ(s->device, DeviceKind::kCuda) << nd["key"];
        EXPECT_FALSE(s->host_accessible) << nd["key"];
      }
    }
    const DeviceStats after = device_->stats();
    EXPECT_EQ(after.live_allocations, 0u);
    EXPECT_EQ(after.live_bytes, 0u);
    EXPECT_EQ(after.live_staging_bytes, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Upstream, CudaLoaderConformanceTest,
                         ::testing::ValuesIn(OkConformanceCases()),
                         [](const auto& p) { return p.param; });

// ptd-load --device cuda --digest: digests read back from the GPU, and each
// weight's dense copy made on the GPU checked against them.
TEST_F(CudaTest, LoadCliDigestsAndMaterializesOnTheGpu) {
  int weights = 0;
  for (const auto& tc : ConformanceCases()) {
    if (tc["expect"] != "ok" || !tc.contains("manifest") || !tc.contains("weights")) continue;
    SCOPED_TRACE(tc["name"].get<std::string>());
    const auto r = ::ptd::testing::RunCommand(
        ::ptd::testing::TestPath("PTD_LOAD_BINARY", PTD_LOAD_BINARY) +
        " --device cuda --json --digest --manifest " + ConformancePath(tc["manifest"]) + " " +
        ConformancePath(tc["ptd"]));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["device"]["kind"], "cuda");
    ASSERT_TRUE(j.contains("materialized")) << r.out;
    EXPECT_TRUE(j["materialized"]["ok"].get<bool>());
    ASSERT_EQ(j["manifests"].size(), 1u);
    for (const auto& want : tc["weights"]) {
      bool found = false;
      for (const auto& got : j["manifests"][0]["weights"]) {
        if (got["fqn"] != want["fqn"]) continue;
        found = true;
        ++weights;
        EXPECT_EQ(got["sha256"], want["sha256"]) << want["fqn"];
        // Every stored weight on the GPU has its dense copy's digest; a
        // runtime-owned one (no digest in cases.json) is never loaded and
        // has none. (Never read a key that may be absent: at() throws
        // instead of reading past a const object.)
        const bool owned = want["sha256"].is_null();
        if (owned || want["device_type"] == 0) {
          EXPECT_FALSE(got.contains("materialized_sha256")) << want["fqn"];
        } else {
          ASSERT_TRUE(got.contains("materialized_sha256")) << want["fqn"];
          EXPECT_EQ(got.at("materialized_sha256"), want["sha256"]) << want["fqn"];
        }
      }
      EXPECT_TRUE(found) << want["fqn"];
    }
  }
  EXPECT_GT(weights, 0);
}

// A model of 6 storages (12 B to 3 MiB) loaded through 1 MiB slots: several
// copies per storage, several storages per phase. A file of 16 B alignment
// whose storages are not a multiple of 64 B apart: each is a buffer (a run)
// of its own on the device, so that there are 6 allocations to fail.
class CudaLoaderModelTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    model_ = WriteTestModel(
        dir_.path(), {4 * kKiB + 4, 1 * kMiB + 20, 3 * kMiB + 4, 12, 2 * kMiB + 36, 64 * kKiB},
        /*with_cpu_weight=*/false, /*segment_alignment=*/16);
    paths_ = BundlePaths{.ptd = model_.ptd, .manifest = model_.manifest};
    auto host = LoadWeights(paths_, std::make_shared<HostDevice>());
    ASSERT_TRUE(host.ok()) << host.status();
    for (const LoadedWeight& w : host->weights())
      expected_.push_back(*DigestLoadedWeight(*host, w));
  }

  static LoadOptions SmallRing() {
    return LoadOptions{.ring_slots = 3, .ring_slot_bytes = 1 * kMiB};
  }

  void ExpectExpected(const LoadedWeights& w) {
    ASSERT_EQ(w.weights().size(), expected_.size());
    for (size_t i = 0; i < expected_.size(); ++i) {
      auto d = DigestLoadedWeight(w, w.weights()[i]);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, expected_[i]) << w.weights()[i].fqn;
    }
  }

  TempDir dir_;
  TestModel model_;
  BundlePaths paths_;
  std::vector<std::string> expected_;
};

TEST_F(CudaLoaderModelTest, NthFaultIsACleanErrorAndFreesEverything) {
  // The plan: 6 storage buffers (FaultDevice allocates each on its own), 3
  // ring slots, 10 copies and as many waits (w2 and w4 in 1 MiB chunks).
  struct Phase {
    const char* name;
    FaultPlan (*plan)(uint64_t n);
    std::vector<uint64_t> nth;
    const char* text;  // In the message.
  };
  const Phase phases[] = {
      {"allocation",
       [](uint64_t n) { return FaultPlan{.fail_allocation = n}; },
       {1, 3, 6},
       ": allocate on "},
      {"staging",
       [](uint64_t n) { return FaultPlan{.fail_staging = n}; },
       {1, 2, 3},
       "): stage: ring slot "},
      {"copy", [](uint64_t n) { return FaultPlan{.fail_copy = n}; }, {1, 2, 5, 10}, "): copy: "},
      {"wait", [](uint64_t n) { return FaultPlan{.fail_wait = n}; }, {1, 2, 5, 10}, "): wait: "},
  };
  for (const Phase& phase : phases) {
    for (uint64_t n : phase.nth) {
      SCOPED_TRACE(std::string(phase.name) + " #" + std::to_string(n));
      FaultPlan plan = phase.plan(n);
      plan.status = absl::ResourceExhaustedError("injected fault");
      auto faulty = std::make_shared<FaultDevice>(device_, plan);
      {
        auto w = LoadWeights(paths_, faulty, SmallRing());
        ASSERT_FALSE(w.ok()) << "the fault did not fire";
        EXPECT_EQ(w.status().code(), absl::StatusCode::kResourceExhausted) << w.status();
        EXPECT_THAT(w.status().message(), HasSubstr("storage 'cuda_fqn_weight:cuda:w"));
        EXPECT_THAT(w.status().message(), HasSubstr(phase.text));
        EXPECT_THAT(w.status().message(), HasSubstr("injected fault"));
      }
      const FaultCounts counts = faulty->counts();
      EXPECT_EQ(counts.live_allocations, 0u);
      EXPECT_EQ(counts.live_staging_bytes, 0u);
      const DeviceStats stats = device_->stats();
      EXPECT_EQ(stats.live_allocations, 0u);
      EXPECT_EQ(stats.live_bytes, 0u);
      EXPECT_EQ(stats.live_staging_bytes, 0u);
      // The device still works after the failed load.
      auto again = LoadWeights(paths_, device_, SmallRing());
      ASSERT_TRUE(again.ok()) << again.status();
      ExpectExpected(*again);
    }
  }
  EXPECT_TRUE(device_->Synchronize().ok());
}

TEST_F(CudaLoaderModelTest, StagingIsReusedAcrossLoads) {
  uint64_t staging_after_first = 0;
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const DeviceStats before = device_->stats();
    auto w = LoadWeights(paths_, device_, SmallRing());
    ASSERT_TRUE(w.ok()) << w.status();
    ExpectExpected(*w);
    const DeviceStats after = device_->stats();
    EXPECT_EQ(after.allocations - before.allocations, 1u) << "one arena per load";
    EXPECT_EQ(w->stats().allocations, 1u);
    EXPECT_GT(w->stats().copies, w->weights().size()) << "large storages take several copies";
    if (i == 0) {
      staging_after_first = after.staging_allocations;
      EXPECT_LE(after.staging_allocations - before.staging_allocations, 3u);
    } else {
      EXPECT_EQ(after.staging_allocations, staging_after_first) << "no cudaHostAlloc per load";
    }
  }
  EXPECT_GT(device_->staging_cache_bytes(), 0u);
  device_->TrimStagingCache();
  EXPECT_EQ(device_->staging_cache_bytes(), 0u);
}

// VmHWM (peak resident set) of this process, in bytes; resets it first when
// `reset` (writing "5" to /proc/self/clear_refs, Linux >= 4.0). 0 when unknown.
uint64_t PeakRss(bool reset) {
  if (reset) {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    if (!clear) return 0;
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * kKiB;
  }
  return 0;
}

uint64_t CurrentRss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * kKiB;
  }
  return 0;
}

// PTD_CUDA_TEST_GIB (default 2) GiB in 64 MiB storages, written with the
// writer after the GPU check, loaded through the default ring (threads + 2
// slots of 16 MiB) with the copies truly asynchronous (FaultDevice passes
// them through to the GPU and only counts staging), then every storage's
// digest read back from the GPU and checked against a host load (in
// batches, so host memory stays bounded).
TEST_F(CudaTest, MultiGiBLoadHoldsOnlyTheRingInHostMemory) {
  const char* env = std::getenv("PTD_CUDA_TEST_GIB");
  const uint64_t gib = env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : 2;
  const uint64_t total = std::max<uint64_t>(gib, 1) << 30;
  const uint64_t storage = 64 * kMiB;
  TempDir dir;
  const TestModel model =
      WriteTestModel(dir.path(), std::vector<uint64_t>(total / storage, storage));
  const BundlePaths paths{.ptd = model.ptd, .manifest = model.manifest};
  // Every storage's digest from host loads of 8 storages at a time.
  std::vector<std::string> want;
  for (size_t first = 0; first < model.fqns.size(); first += 8) {
    const std::vector<std::string> batch(
        model.fqns.begin() + first, model.fqns.begin() + std::min(first + 8, model.fqns.size()));
    auto host = LoadWeights(paths, std::make_shared<HostDevice>(), LoadOptions{.fqns = batch});
    ASSERT_TRUE(host.ok()) << host.status();
    for (const std::string& fqn : batch)
      want.push_back(*DigestLoadedWeight(*host, *host->Find(fqn)));
  }
  device_->TrimStagingCache();
  auto watched = std::make_shared<FaultDevice>(device_);  // No faults: counts staging.
  const uint64_t rss_before = CurrentRss();
  const uint64_t hwm_reset = PeakRss(/*reset=*/true);
  {
    auto w = LoadWeights(paths, watched);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().bytes, model.data_bytes);
    const uint64_t ring = kDefaultRingSlots * kDefaultRingSlotBytes;
    EXPECT_LE(watched->counts().peak_live_staging_bytes, ring);
    if (hwm_reset != 0) {
      const uint64_t peak = PeakRss(false);
      const uint64_t grew = peak > rss_before ? peak - rss_before : 0;
      std::printf("[          ] %llu MiB loaded; peak RSS grew %llu MiB (ring %llu MiB)\n",
                  static_cast<unsigned long long>(model.data_bytes / kMiB),
                  static_cast<unsigned long long>(grew / kMiB),
                  static_cast<unsigned long long>(ring / kMiB));
      // The ring (pinned, resident), the plan and slack for the allocator:
      // far below the file.
      uint64_t device_bytes = 0;
#ifdef PTD_CUDASIM
      // The simulator's device memory is this process's memory.
      device_bytes = cudasim::DeviceBytesInUse(device_->index());
#endif
      EXPECT_LE(grew, ring + 256 * kMiB + device_bytes);
    }
    for (size_t i = 0; i < model.fqns.size(); ++i) {
      const LoadedWeight* lw = w->Find(model.fqns[i]);
      ASSERT_NE(lw, nullptr);
      auto d = DigestLoadedStorage(*w, w->storage(*lw));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, want[i]) << model.fqns[i];
    }
  }
  EXPECT_EQ(device_->stats().live_allocations, 0u);
}

}  // namespace
}  // namespace ptd
