// VerifyOptions::list_limit: a readable report of tens of thousands of keys
// builds only the rows it prints, and says exactly what the full one says.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/manifest.h"
#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::testing::TempDir;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;

VerifyOptions Options(const testing::TestModel& m) {
  VerifyOptions o;
  o.paths.ptd = m.ptd;
  o.paths.manifest = m.manifest;
  return o;
}

TEST(ReportListTest, ALimitedReportListsTheFirstRowsAndTheTotals) {
  TempDir dir;
  const testing::TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(120, 16));
  VerifyOptions o = Options(m);
  const VerifyOutcome full = RunVerify(o);
  const nlohmann::ordered_json full_json = VerifyJson(full);
  o.list_limit = 7;
  const VerifyOutcome cut = RunVerify(o);
  const nlohmann::ordered_json cut_json = VerifyJson(cut);
  ASSERT_EQ(full.exit_code(), 0) << FormatText(full);
  ASSERT_EQ(cut.exit_code(), 0);

  EXPECT_EQ(full_json["ptd"]["named_data"].size(), 120u);
  EXPECT_FALSE(full_json["ptd"].contains("named_data_count"));
  EXPECT_FALSE(full_json["manifests"][0].contains("weight_count"));
  EXPECT_EQ(cut_json["ptd"]["named_data"].size(), 7u);
  EXPECT_EQ(cut_json["ptd"]["named_data_count"], 120);
  EXPECT_EQ(cut_json["ptd"]["segments"].size(), 7u);
  EXPECT_EQ(cut_json["ptd"]["segment_count"], 120);
  EXPECT_TRUE(cut_json["ptd"]["named_data"][0].contains("file_offset"));
  ASSERT_EQ(cut_json["manifests"].size(), 1u);
  EXPECT_EQ(cut_json["manifests"][0]["weights"].size(), 7u);
  EXPECT_EQ(cut_json["manifests"][0]["weight_count"], 120);
  // The rows it lists are the full report's first rows (keys with their
  // segment's file offset, weights with the size of the segment behind them).
  for (size_t i = 0; i < 7; ++i) {
    nlohmann::ordered_json key = cut_json["ptd"]["named_data"][i];
    const auto seg = key["segment_index"].get<size_t>();
    EXPECT_EQ(key["file_offset"].get<uint64_t>(),
              full_json["ptd"]["segment_base_offset"].get<uint64_t>() +
                  full_json["ptd"]["segments"][seg]["offset"].get<uint64_t>())
        << i;
    key.erase("file_offset");
    EXPECT_EQ(key, full_json["ptd"]["named_data"][i]) << i;
    EXPECT_EQ(cut_json["ptd"]["segments"][i], full_json["ptd"]["segments"][i]) << i;
    nlohmann::ordered_json weight = cut_json["manifests"][0]["weights"][i];
    EXPECT_EQ(weight["segment_size"], 16) << i;  // The segment behind its key.
    weight.erase("segment_size");
    EXPECT_EQ(weight, full_json["manifests"][0]["weights"][i]) << i;
  }
  EXPECT_EQ(cut_json["errors"], full_json["errors"]);
  EXPECT_EQ(cut_json["warnings"], full_json["warnings"]);

  // Printed with as many rows as it lists, it is the full report's text.
  const std::string text =
      FormatText(cut, TextOptions{.max_rows = 7, .names = cli::ToolInputNames()});
  EXPECT_EQ(text, FormatText(full, TextOptions{.max_rows = 7, .names = cli::ToolInputNames()}));
  EXPECT_THAT(text, HasSubstr("120 segments, 120 keys"));
  EXPECT_THAT(text, HasSubstr("120 weights"));
  EXPECT_THAT(text, HasSubstr("... and 113 more keys; --all lists them"));
  EXPECT_THAT(text, HasSubstr("... and 113 more weights; --all lists them"));
  // Fewer rows than it lists: the summary rows still count from the totals.
  EXPECT_THAT(FormatText(cut, TextOptions{.max_rows = 3, .names = cli::ToolInputNames()}),
              HasSubstr("... and 117 more weights; --all lists them"));
}

// Weights listed in the reverse order of their keys: the first weights'
// keys are not among the listed keys, and the table still gives their
// segment sizes (from each weight's "segment_size").
TEST(ReportListTest, WeightsWhoseKeysAreNotListedKeepTheirSegmentSizes) {
  TempDir dir;
  const testing::TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(30, 16));
  auto manifest = ParseManifest(testing::ReadFileBytes(m.manifest));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::reverse(manifest->entries.begin(), manifest->entries.end());
  auto bytes = EncodeManifest(*manifest);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  testing::WriteFileBytes(m.manifest, *bytes);

  VerifyOptions o = Options(m);
  const VerifyOutcome full = RunVerify(o);
  const nlohmann::ordered_json full_json = VerifyJson(full);
  o.list_limit = 5;
  const VerifyOutcome cut = RunVerify(o);
  const nlohmann::ordered_json cut_json = VerifyJson(cut);
  ASSERT_EQ(full.exit_code(), 0) << FormatText(full);
  const auto& first = cut_json["manifests"][0]["weights"][0];
  EXPECT_EQ(first["fqn"], full_json["manifests"][0]["weights"][0]["fqn"]);
  EXPECT_EQ(first["segment_size"], 16);
  EXPECT_FALSE(full_json["manifests"][0]["weights"][0].contains("segment_size"));
  EXPECT_EQ(FormatText(cut, TextOptions{.max_rows = 5, .names = cli::ToolInputNames()}),
            FormatText(full, TextOptions{.max_rows = 5, .names = cli::ToolInputNames()}));
}

TEST(ReportListTest, ALimitAtOrOverTheCountListsEverything) {
  TempDir dir;
  const testing::TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(5, 16));
  VerifyOptions o = Options(m);
  const VerifyOutcome full = RunVerify(o);
  const nlohmann::ordered_json full_json = VerifyJson(full);
  for (size_t limit : {5, 6, 1000}) {
    o.list_limit = limit;
    const VerifyOutcome cut = RunVerify(o);
    const nlohmann::ordered_json cut_json = VerifyJson(cut);
    EXPECT_EQ(cut_json, full_json) << limit;
  }
}

TEST(ReportListTest, DigestsAreTakenForEveryWeightWhateverIsListed) {
  TempDir dir;
  const testing::TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(40, 64));
  VerifyOptions o = Options(m);
  o.digest = true;
  uint64_t full_calls = 0, cut_calls = 0, cut_total = 0;
  o.digest_progress = [&](uint64_t, uint64_t) { ++full_calls; };
  const VerifyOutcome full = RunVerify(o);
  const nlohmann::ordered_json full_json = VerifyJson(full);
  o.list_limit = 4;
  o.digest_progress = [&](uint64_t, uint64_t total) {
    ++cut_calls;
    cut_total = total;
  };
  const VerifyOutcome cut = RunVerify(o);
  const nlohmann::ordered_json cut_json = VerifyJson(cut);
  EXPECT_EQ(full_calls, 80u);  // 40 keys and 40 weights.
  EXPECT_EQ(cut_calls, full_calls);
  EXPECT_EQ(cut_total, 80u);
  ASSERT_EQ(cut_json["manifests"][0]["weights"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const auto& w = cut_json["manifests"][0]["weights"][i];
    ASSERT_TRUE(w["sha256"].is_string()) << i;
    EXPECT_EQ(w["sha256"], full_json["manifests"][0]["weights"][i]["sha256"]) << i;
  }
  EXPECT_EQ(cut_json["warnings"], full_json["warnings"]);
}

}  // namespace
}  // namespace ptd
