// One regression case per rule of docs/SPEC.md, read from the checked-in
// files under tests/data/rules/ (see tests/testing/rule_files.h for the
// naming and how to regenerate them). Each case asserts its own rule.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ptd/verify.h"
#include "ptd/weight_writer.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/rule_files.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

namespace fs = std::filesystem;
using ::ptd::testing::DataPath;
using ::ptd::testing::Describe;
using ::ptd::testing::HasError;
using ::ptd::testing::HasWarning;
using ::ptd::testing::ReadFileBytes;

std::string RulesDir() { return DataPath("rules"); }

// Stem of a case file: its name up to the first '.'.
std::string StemOf(const std::string& name) { return name.substr(0, name.find('.')); }
std::string RuleOf(const std::string& stem) { return stem.substr(0, stem.find('_')); }

// Every case stem under tests/data/rules, sorted.
std::vector<std::string> Stems() {
  std::set<std::string> stems;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(RulesDir(), ec)) {
    const std::string name = e.path().filename().string();
    if (name == "README.md") continue;
    stems.insert(StemOf(name));
  }
  return std::vector<std::string>(stems.begin(), stems.end());
}

// The rule IDs docs/SPEC.md defines.
std::set<std::string> SpecRules() {
  std::ifstream in(DataPath("../../docs/SPEC.md"));
  std::stringstream ss;
  ss << in.rdbuf();
  // Sections 1-6: the .ptd, manifest and .pte rules this project checks.
  // Section 7 (safetensors: S1-S10, N1; issue 35) is not implemented yet,
  // and its dtype names (U8, ...) would read as rule IDs here.
  std::string text = ss.str();
  if (const size_t end = text.find("\n## 7."); end != std::string::npos) text.resize(end);
  // Tokens \b[HCMGXPWDRU][0-9]\b (no <regex>: GCC 12 warns inside it under
  // the sanitizers, and -Werror makes that fatal).
  const auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  std::set<std::string> rules;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (std::string_view("HCMGXPWDRU").find(text[i]) == std::string_view::npos) continue;
    if (!std::isdigit(static_cast<unsigned char>(text[i + 1]))) continue;
    if (i > 0 && word(text[i - 1])) continue;
    if (i + 2 < text.size() && word(text[i + 2])) continue;
    rules.insert(text.substr(i, 2));
  }
  return rules;
}

bool Exists(const std::string& path) { return fs::exists(path); }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(RuleFilesTest, SpecDefinesTheRulesWeExpect) {
  // A guard on the parser below: the SPEC's rules, as its README lists them.
  const std::set<std::string> rules = SpecRules();
  EXPECT_EQ(rules.size(), 38u) << ::testing::PrintToString(rules);
  for (const char* r : {"H1", "H5", "C8", "M6", "G5", "W3", "W4", "X3", "P4", "D1", "R1",
                        "U1"}) {
    EXPECT_TRUE(rules.count(r)) << r;
  }
}

TEST(RuleFilesTest, EveryRuleOfTheSpecHasARegressionCase) {
  std::set<std::string> covered;
  for (const std::string& stem : Stems()) covered.insert(RuleOf(stem));
  for (const std::string& rule : SpecRules()) {
    EXPECT_TRUE(covered.count(rule))
        << "docs/SPEC.md rule " << rule << " has no case under tests/data/rules "
        << "(add one to tests/testing/rule_files.cc and regenerate)";
  }
  for (const std::string& rule : covered) {
    EXPECT_TRUE(SpecRules().count(rule)) << "a case for " << rule
                                         << ", which docs/SPEC.md does not define";
  }
}

TEST(RuleFilesTest, CheckedInFilesAreTheGeneratorsOutput) {
  // The files are generated, never edited by hand: regenerating gives the
  // same bytes, and there is no file the generator does not write.
  std::set<std::string> generated;
  for (const ::ptd::testing::RuleFile& f : ::ptd::testing::RuleFiles()) {
    generated.insert(f.name);
    const std::string path = RulesDir() + "/" + f.name;
    ASSERT_TRUE(Exists(path)) << f.name << " is not checked in; regenerate";
    EXPECT_TRUE(ReadFileBytes(path) == f.bytes) << f.name << " differs; regenerate";
  }
  for (const auto& e : fs::directory_iterator(RulesDir())) {
    const std::string name = e.path().filename().string();
    if (name == "README.md") continue;
    EXPECT_TRUE(generated.count(name)) << name << " is not written by the generator";
  }
}

class RuleCaseTest : public ::testing::TestWithParam<std::string> {};

// Runs a writer case: every weight is added; the last must be refused with
// InvalidArgument naming the rule. With "accept": true (W4), every weight is
// accepted, the runtime-owned ones get no bytes in the .ptd, and what was
// written verifies.
void RunWriterCase(const std::string& rule, const std::string& path) {
  const nlohmann::json j = ReadJson(path);
  CudaWeightWriter writer(j.at("so_blob_key").get<std::string>());
  const bool accept = j.value("accept", false);
  absl::Status last;
  std::vector<std::vector<uint8_t>> storages;  // Outlive the specs.
  for (const auto& w : j.at("weights")) {
    const auto& v = w.at("value");
    const auto& p = w.at("properties");
    storages.emplace_back(v.at("storage_nbytes").get<uint64_t>(), 0x11);
    WeightSpec spec;
    spec.fqn = w.at("fqn").get<std::string>();
    spec.dtype = w.at("dtype").get<int32_t>();
    spec.device_type = w.at("device_type").get<int32_t>();
    spec.value.storage = storages.back();
    spec.value.storage_offset = v.at("storage_offset").get<int64_t>();
    spec.value.sizes = v.at("sizes").get<std::vector<int64_t>>();
    spec.value.strides = v.at("strides").get<std::vector<int64_t>>();
    spec.value.is_original_storage = v.at("is_original_storage").get<bool>();
    if (!p.at("storage_size").is_null()) {
      spec.properties.storage_size = p.at("storage_size").get<uint64_t>();
    }
    spec.properties.offset = p.at("offset").get<int64_t>();
    spec.properties.shape = p.at("shape").get<std::vector<int64_t>>();
    spec.properties.stride = p.at("stride").get<std::vector<int64_t>>();
    last = writer.Add(spec);
    if (accept) {
      ASSERT_TRUE(last.ok()) << spec.fqn << ": " << last;
    }
  }
  if (accept) {
    std::set<std::string> owned_keys;
    for (const WeightEntry& e : writer.manifest().entries) {
      if (!e.runtime_owned()) continue;
      owned_keys.emplace(e.storage_key);
      EXPECT_GT(e.storage_nbytes, 0u) << e.fqn;  // From the view, not the 0 bytes.
    }
    ASSERT_FALSE(owned_keys.empty()) << "a " << rule << " case needs a runtime-owned weight";
    EXPECT_EQ(writer.ptd().num_keys(), writer.manifest().entries.size() - owned_keys.size());
    const std::string dir = ::testing::TempDir();
    const std::string ptd = dir + "/" + rule + "_case.ptd";
    const std::string manifest = dir + "/" + rule + "_case.manifest";
    ASSERT_TRUE(writer.Write(ptd, manifest).ok());
    VerifyOptions options;
    options.ptd_path = ptd;
    options.manifest_path = manifest;
    const VerifyOutcome out = RunVerify(options);
    EXPECT_EQ(out.exit_code(), 0) << Describe(out.report);
    for (const auto& n : out.json["ptd"]["named_data"]) {
      EXPECT_EQ(owned_keys.count(n["key"].get<std::string>()), 0u) << n["key"];
    }
    return;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kInvalidArgument) << last;
  EXPECT_THAT(std::string(last.message()), ::testing::HasSubstr("(" + rule + ")"));
  EXPECT_THAT(std::string(last.message()), ::testing::HasSubstr("AOTI"));
}

TEST_P(RuleCaseTest, AssertsItsRule) {
  const std::string stem = GetParam();
  const std::string rule = RuleOf(stem);
  const std::string base = RulesDir() + "/" + stem;
  if (Exists(base + ".writer.json")) {
    RunWriterCase(rule, base + ".writer.json");
    return;
  }
  ASSERT_TRUE(Exists(base + ".ptd")) << "a verifier case needs " << stem << ".ptd";
  VerifyOptions options;
  options.ptd_path = base + ".ptd";
  if (Exists(base + ".manifest")) options.manifest_path = base + ".manifest";
  if (Exists(base + ".pte")) options.pte_path = base + ".pte";
  if (Exists(base + ".verify.json")) {
    const nlohmann::json j = ReadJson(base + ".verify.json");
    options.digest = j.value("digest", false);
    options.digest_limit = j.value("digest_limit", kDefaultDigestLimit);
  }
  for (bool mmap : {false, true}) {
    options.use_mmap = mmap;
    const VerifyOutcome out = RunVerify(options);
    SCOPED_TRACE(std::string(mmap ? "mmap" : "pread") + "\n" + Describe(out.report));
    ASSERT_FALSE(out.io_error.has_value()) << *out.io_error;
    if (::ptd::testing::IsWarningRule(rule)) {
      EXPECT_THAT(out.report, HasWarning(rule));
      EXPECT_TRUE(out.report.ok()) << "a warning-only case has errors";
      EXPECT_EQ(out.exit_code(), 0);
    } else if (rule == "X2") {
      // X2 is reported through the G rule it names (G1-G4 between a
      // manifest and this .ptd).
      EXPECT_THAT(out.report,
                  ::testing::AnyOf(HasError("G1"), HasError("G2"), HasError("G3"),
                                   HasError("G4")));
      EXPECT_EQ(out.exit_code(), 1);
    } else {
      EXPECT_THAT(out.report, HasError(rule));
      EXPECT_EQ(out.exit_code(), 1);
    }
    // The JSON names the rule too (what CI and users read).
    const auto& list = ::ptd::testing::IsWarningRule(rule) ? out.json["warnings"]
                                                           : out.json["errors"];
    if (rule != "X2") {
      EXPECT_TRUE(std::any_of(list.begin(), list.end(),
                              [&](const auto& d) { return d["rule"] == rule; }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SpecRules, RuleCaseTest, ::testing::ValuesIn(Stems()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param;
                         });

}  // namespace
}  // namespace ptd
