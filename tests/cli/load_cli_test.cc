// ptd-load end to end: every ok conformance case loads onto the host with
// digests (from the loaded memory) equal to cases.json; exit codes for a
// broken rule, usage errors, unreadable input and an absent CUDA device.
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/host_device.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::RunCommand;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::string Load(const std::string& args) { return std::string(PTD_LOAD_BINARY) + " " + args; }

// A block of 8 MiB or more is mapped, and advised for transparent huge
// pages where THP is on, no hypervisor takes back free huge-page blocks, and
// the free lists hold twice the block in them (HugePages::kAuto): the JSON
// says how many bytes were.
// --device-budget and --host-fqn place storages in host memory mapped for a
// GPU: on the host they are usage errors naming the flag, and a size that
// is not one is refused at parse time. (The placement itself:
// tests/cudasim/cuda_budget_sim_test.cc.)
TEST(LoadCliTest, DeviceBudgetIsAUsageErrorOnTheHostAndNeedsASize) {
  const std::string ptd = ConformancePath("files/k02_one_storage_key_many_views.ptd");
  auto r = RunCommand(Load("--device host --device-budget 48M " + ptd + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--device-budget applies to a CUDA device"));
  r = RunCommand(Load("--device host --host-fqn 'tok_embeddings.*' " + ptd + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--host-fqn applies to a CUDA device"));
  r = RunCommand(Load("--device host --device-budget 48MB " + ptd + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--device-budget: a byte count"));
  // A plain load reports every storage in host memory.
  r = RunCommand(Load("--device host --json " + ptd));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["load"]["placement"]["host"]["storages"], j["load"]["storages"]);
  EXPECT_EQ(j["load"]["placement"]["device"]["storages"], 0);
  EXPECT_TRUE(j["load"]["device_budget"].is_null());
  for (const auto& nd : j["ptd"]["named_data"]) EXPECT_EQ(nd["residency"], "host");
}

TEST(LoadCliTest, ReportsTheBytesAdvisedForHugePages) {
  ::ptd::testing::TempDir dir;
  const auto m = ::ptd::testing::WriteTestModel(dir.path(), {uint64_t{16} << 20});
  const auto r = RunCommand(Load("--device host --json --manifest " + m.manifest + " " + m.ptd));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  const uint64_t huge = j["load"]["huge_page_bytes"].get<uint64_t>();
  const HugePageMode mode = SystemHugePageMode();
  if (mode != HugePageMode::kAlways && mode != HugePageMode::kMadvise) {
    EXPECT_EQ(huge, 0u);
    return;
  }
  const std::optional<uint64_t> free_bytes = FreeHugePageBytes();
  if (FreeHugePagesAreReported()) {
    EXPECT_EQ(huge, 0u) << "huge pages would come from memory the hypervisor took back";
  } else if (!HugePageFaultsMayCompact() || (free_bytes && *free_bytes >= (uint64_t{1} << 30))) {
    // 16 MiB, a multiple of the huge page: the whole block.
    EXPECT_EQ(huge, uint64_t{16} << 20);
  } else {
    EXPECT_THAT(huge, ::testing::AnyOf(0u, uint64_t{16} << 20));
  }
  // --huge-pages forces either way; any other value is a usage error.
  const auto advised = [&](const std::string& flag) {
    const auto run = RunCommand(
        Load("--device host --json " + flag + " --manifest " + m.manifest + " " + m.ptd));
    EXPECT_EQ(run.exit_code, 0) << flag << "\n" << run.out;
    return json::parse(run.out)["load"]["huge_page_bytes"].get<uint64_t>();
  };
  EXPECT_EQ(advised("--huge-pages off"), 0u);
  EXPECT_EQ(advised("--huge-pages on"), uint64_t{16} << 20);
  const auto bad = RunCommand(Load("--device host --huge-pages maybe " + m.ptd));
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
}

TEST(LoadCliTest, EveryOkCaseLoadsWithTheExpectedDigests) {
  int checked = 0;
  for (const auto& tc : ConformanceCases()) {
    if (tc["expect"] != "ok") continue;
    SCOPED_TRACE(tc["name"].get<std::string>());
    std::vector<std::string> routes;
    if (tc["kind"] == "container") routes.push_back("");
    if (tc.contains("manifest") && !tc.contains("via")) {
      routes.push_back("--manifest " + ConformancePath(tc["manifest"]));
    }
    if (tc.contains("pte")) routes.push_back("--pte " + ConformancePath(tc["pte"]));
    for (const std::string& plain : routes) {
      // Read, and mapped from the file: the same digests either way.
      for (const std::string map : {"", "--map "}) {
        const std::string route = map + plain;
        const auto r = RunCommand(
            Load("--device host --json --digest " + route + " " + ConformancePath(tc["ptd"])));
        ASSERT_EQ(r.exit_code, 0) << route << "\n" << r.out;
        const json j = json::parse(r.out);
        // Conformance files are small: their blocks come from the heap.
        EXPECT_EQ(j["load"]["huge_page_bytes"], 0);
        if (map.empty()) {
          EXPECT_EQ(j["load"]["mapped"], 0);
        } else {
          EXPECT_LE(j["load"]["mapped"].get<uint64_t>(), j["load"]["storages"].get<uint64_t>());
          EXPECT_EQ(j["load"]["mapped"].get<uint64_t>() > 0,
                    j["load"]["mappings"].get<uint64_t>() > 0);
        }
        EXPECT_TRUE(j["ok"].get<bool>());
        EXPECT_EQ(j["device"]["kind"], "host");
        // Every timing counts from before the one verification.
        const json& t = j["timings"];
        EXPECT_GT(t["verify_s"].get<double>(), 0);
        EXPECT_GE(t["first_weight_s"].get<double>(), t["verify_s"].get<double>());
        EXPECT_LE(t["first_weight_s"].get<double>(), t["total_s"].get<double>());
        EXPECT_GE(t["total_s"].get<double>(),
                  t["verify_s"].get<double>() + t["read_s"].get<double>());
        if (tc.contains("named_data")) {
          for (const auto& want : tc["named_data"]) {
            bool found = false;
            for (const auto& got : j["ptd"]["named_data"]) {
              if (got["key"] != want["key"]) continue;
              found = true;
              EXPECT_EQ(got["sha256"], want["sha256"]) << want["key"];
            }
            EXPECT_TRUE(found) << want["key"];
          }
        }
        if (tc.contains("weights")) {
          ASSERT_EQ(j["manifests"].size(), 1u);
          for (const auto& want : tc["weights"]) {
            bool found = false;
            for (const auto& got : j["manifests"][0]["weights"]) {
              if (got["fqn"] != want["fqn"]) continue;
              found = true;
              // Runtime-owned entries (no digest in cases.json) are listed,
              // never loaded, and have no sha256.
              const bool owned = want["sha256"].is_null();
              EXPECT_EQ(got["runtime_owned"].get<bool>(), owned) << want["fqn"];
              EXPECT_EQ(got["loaded"].get<bool>(), !owned) << want["fqn"];
              EXPECT_EQ(got["sha256"], want["sha256"]) << want["fqn"];
            }
            EXPECT_TRUE(found) << want["fqn"];
          }
          size_t owned = 0;
          for (const auto& want : tc["weights"]) owned += want["sha256"].is_null() ? 1 : 0;
          EXPECT_EQ(j["load"]["weights"], tc["weights"].size() - owned);
          EXPECT_EQ(j["load"]["runtime_owned"], owned);
          ASSERT_EQ(j["runtime_owned"].size(), owned);
          for (const auto& ro : j["runtime_owned"]) {
            EXPECT_TRUE(ro.contains("required_nbytes") && ro.contains("sizes") &&
                        ro.contains("strides") && ro.contains("storage_offset") &&
                        ro.contains("dtype"))
                << ro.dump();
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 10);
}

TEST(LoadCliTest, SubsetLoadsOnlyTheNamedWeights) {
  const auto r =
      RunCommand(Load("--json --digest --fqn layers.0.attn.q --fqn lm_head.weight --manifest " +
                      ConformancePath("files/k01_view_geometry.manifest") + " " +
                      ConformancePath("files/k01_view_geometry.ptd")));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["load"]["weights"], 2);
  EXPECT_EQ(j["load"]["storages"], 2);
  int loaded = 0;
  for (const auto& w : j["manifests"][0]["weights"]) {
    loaded += w["loaded"].get<bool>();
    EXPECT_EQ(w.contains("sha256"), w["loaded"].get<bool>());
  }
  EXPECT_EQ(loaded, 2);
}

TEST(LoadCliTest, TextReportAndRepeat) {
  const auto r =
      RunCommand(Load("--repeat 3 --threads 2 --manifest " +
                      ConformancePath("files/k02_one_storage_key_many_views.manifest") + " " +
                      ConformancePath("files/k02_one_storage_key_many_views.ptd")));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("4 weights (3 reused, 0 runtime-owned), 1 storage, 192 bytes"));
  EXPECT_THAT(r.out, HasSubstr("3 loads: median"));
  EXPECT_THAT(r.out, HasSubstr("GB/s"));
}

TEST(LoadCliTest, MapSaysWhatItMapped) {
  const auto r =
      RunCommand(Load("--map --device host --manifest " +
                      ConformancePath("files/k02_one_storage_key_many_views.manifest") + " " +
                      ConformancePath("files/k02_one_storage_key_many_views.ptd")));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("0 reads of 0 bytes, 0 copies, 1 mapped from the file (192 bytes, "
                               "1 mapping)"));
  EXPECT_THAT(r.out, HasSubstr(", map "));
}

// --io picks the read engine; load.io says what ran, and a fallback says why
// (a copy in /dev/shm, tmpfs: direct falls back to buffered).
TEST(LoadCliTest, IoSaysWhichEngineReadAndWhy) {
  ::ptd::testing::TempDir dir;
  const auto m = ::ptd::testing::WriteTestModel(dir.path(), {uint64_t{1} << 20, 1000, 1000});
  auto r =
      RunCommand(Load("--device host --json --io buffered --manifest " + m.manifest + " " + m.ptd));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json io = json::parse(r.out)["load"]["io"];
  EXPECT_EQ(io["requested"], "buffered");
  EXPECT_EQ(io["engines"]["direct"], 0);
  EXPECT_GE(io["engines"]["buffered"].get<uint64_t>(), m.data_bytes);
  EXPECT_TRUE(io["fallbacks"].empty());
  EXPECT_TRUE(io["gds_mode"].is_null());
  EXPECT_EQ(io["file_bytes"].get<uint64_t>(), std::filesystem::file_size(m.ptd));

  r = RunCommand(Load("--device host --io direct --manifest " + m.manifest + " " + m.ptd));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("  io (direct): "));

  if (std::filesystem::is_directory("/dev/shm")) {
    const std::string shm =
        "/dev/shm/" + std::filesystem::path(dir.path()).filename().string() + ".ptd";
    std::filesystem::copy_file(m.ptd, shm);
    r = RunCommand(Load("--device host --json --io direct --manifest " + m.manifest + " " + shm));
    std::filesystem::remove(shm);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    io = json::parse(r.out)["load"]["io"];
    ASSERT_EQ(io["fallbacks"].size(), 1u) << io.dump();
    EXPECT_EQ(io["fallbacks"][0]["from"], "direct");
    EXPECT_EQ(io["fallbacks"][0]["to"], "buffered");
    EXPECT_THAT(io["fallbacks"][0]["reason"].get<std::string>(), HasSubstr("tmpfs"));
    EXPECT_EQ(io["engines"]["direct"], 0);
  }
  r = RunCommand(Load("--io fast " + m.ptd + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--io"));
}

TEST(LoadCliTest, ABrokenRuleIsExitOneAndLoadsNothing) {
  const auto r = RunCommand(Load("--json --manifest " +
                                 ConformancePath("files/k12_storage_size_mismatch.manifest") + " " +
                                 ConformancePath("files/k12_storage_size_mismatch.ptd")));
  EXPECT_EQ(r.exit_code, 1);
  const json j = json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_FALSE(j["errors"].empty());
  EXPECT_FALSE(j.contains("load"));
}

TEST(LoadCliTest, UsageAndInputErrorsAreExitTwo) {
  const std::string ptd = ConformancePath("files/c01_layouts_and_shared_segment.ptd");
  EXPECT_EQ(RunCommand(Load("--bogus " + ptd + " 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Load("2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Load("/nonexistent.ptd 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Load("--manifest a --pte b " + ptd + " 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Load("--device tpu " + ptd + " 2>/dev/null")).exit_code, 2);
  EXPECT_EQ(RunCommand(Load("--help")).exit_code, 0);
}

TEST(LoadCliTest, CudaWithoutCudaSaysSo) {
  const auto r = RunCommand(Load(
      "--device cuda " + ConformancePath("files/c01_layouts_and_shared_segment.ptd") + " 2>&1"));
#ifndef PTD_LOAD_HAS_CUDA
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("built without CUDA"));
#else
  // Built with CUDA: without a usable GPU (no device, or no driver) the
  // command says so and exits 2; with one it loads.
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no CUDA device"));
#endif
}

}  // namespace
}  // namespace ptd
