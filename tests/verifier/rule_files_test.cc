// One regression case per rule of docs/SPEC.md, read from the checked-in
// files under tests/data/rules/ (see tests/testing/rule_files.h for the
// naming and how to regenerate them). Each case asserts its own rule.
#include "tests/testing/rule_files.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
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

#include "ptd/checkpoint.h"
#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/rules.h"
#include "ptd/safetensors.h"
#include "ptd/verify.h"
#include "ptd/weight_writer.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/signing_fixture.h"
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
std::string StemRule(const std::string& stem) { return stem.substr(0, stem.find('_')); }

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

// Rule IDs in `text`: a letter of `letters` and digits (one digit unless
// `multi_digit`) standing as a word. No <regex>: GCC 12 warns inside it
// under the sanitizers, and -Werror makes that fatal.
void ScanRules(const std::string& text, std::string_view letters, bool multi_digit,
               std::set<std::string>* rules) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (letters.find(text[i]) == std::string_view::npos) continue;
    if (!digit(text[i + 1])) continue;
    if (i > 0 && word(text[i - 1])) continue;
    size_t end = i + 2;
    if (multi_digit) {
      while (end < text.size() && digit(text[end])) ++end;
    }
    if (end < text.size() && word(text[end])) continue;
    rules->insert(text.substr(i, end - i));
  }
}

// The rule IDs docs/SPEC.md defines: H C M G X P W D R U in sections 1-6,
// S and N in section 7 (safetensors), where dtype names such as U8 or F16
// are not rule IDs.
std::set<std::string> SpecRules() {
  std::ifstream in(DataPath("../../docs/SPEC.md"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t section7 = std::min(text.find("\n## 7."), text.size());
  const size_t section8 = std::min(text.find("\n## 8."), text.size());
  std::set<std::string> rules;
  ScanRules(text.substr(0, section7), "HCMGXPWDRU", false, &rules);
  ScanRules(text.substr(section7, section8 - section7), "SN", true, &rules);
  ScanRules(text.substr(section8), "A", false, &rules);
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
  // 38 in sections 1-6, S1-S12 and N1 in section 7, A1-A7 in section 8.
  EXPECT_EQ(rules.size(), 58u) << ::testing::PrintToString(rules);
  for (const char* r : {"H1", "H5", "C8", "M6", "G5",  "W3",  "W4",  "X3", "P4", "D1",
                        "R1", "U1", "S1", "S7", "S10", "S11", "S12", "N1", "A1", "A7"}) {
    EXPECT_TRUE(rules.count(r)) << r;
  }
}

TEST(RuleFilesTest, EveryRuleOfTheSpecHasARegressionCase) {
  std::set<std::string> covered;
  for (const std::string& stem : Stems()) covered.insert(StemRule(stem));
  for (const std::string& rule : SpecRules()) {
    EXPECT_TRUE(covered.count(rule))
        << "docs/SPEC.md rule " << rule << " has no case under tests/data/rules "
        << "(add one to tests/testing/rule_files.cc and regenerate)";
  }
  for (const std::string& rule : covered) {
    EXPECT_TRUE(SpecRules().count(rule))
        << "a case for " << rule << ", which docs/SPEC.md does not define";
  }
}

// The library's rule table (ptd/rules.h) against docs/SPEC.md: the same IDs
// (the SPEC's scan, with the failures of section 6 that are no format rule),
// each in the section the table names, and a warning exactly when a line of
// the SPEC names the rule beside the word "warning".
TEST(RuleFilesTest, TheRuleTableIsTheSpecs) {
  std::ifstream in(DataPath("../../docs/SPEC.md"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::set<std::string> table;
  for (const RuleInfo& r : Rules()) table.insert(std::string(r.id));
  std::set<std::string> spec = SpecRules();
  spec.insert({kInputRule, kLoadRule});
  EXPECT_EQ(table, spec);
  for (const RuleInfo& r : Rules()) {
    const std::string id(r.id);
    int section = 0;
    bool in_section = false;
    bool warned = false;
    for (const std::string& line : lines) {
      if (line.rfind("## ", 0) == 0 && line.size() > 3 &&
          std::isdigit(static_cast<unsigned char>(line[3]))) {
        section = std::atoi(line.c_str() + 3);
      }
      std::set<std::string> named;
      ScanRules(line, id.substr(0, 1), id.size() > 2, &named);
      if (!named.count(id)) continue;
      in_section |= section == r.section;
      warned |= line.find("warning") != std::string::npos;
    }
    EXPECT_TRUE(in_section) << id << " is not named in SPEC section " << r.section;
    EXPECT_EQ(warned, r.severity == Severity::kWarning) << id;
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
    options.paths.ptd = ptd;
    options.paths.manifest = manifest;
    const VerifyOutcome out = RunVerify(options);
    const nlohmann::ordered_json out_json = VerifyJson(out);
    EXPECT_EQ(out.exit_code(), 0) << Describe(out.report);
    for (const auto& n : out_json["ptd"]["named_data"]) {
      EXPECT_EQ(owned_keys.count(n["key"].get<std::string>()), 0u) << n["key"];
    }
    return;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kInvalidArgument) << last;
  EXPECT_THAT(std::string(last.message()), ::testing::HasSubstr("(" + rule + ")"));
  EXPECT_THAT(std::string(last.message()), ::testing::HasSubstr("AOTI"));
  EXPECT_EQ(RuleOf(last), rule) << last;
}

// Runs a safetensors case (S1-S7): the file (or the index, S7) is refused
// with DataLoss naming the rule, through SafetensorsFile::Open over pread
// and mmap, and through SafetensorsCheckpoint::Open.
void RunSafetensorsCase(const std::string& rule, const std::string& base) {
  const std::string want = "(" + rule + ")";
  const bool index = Exists(base + std::string(kSafetensorsIndexSuffix));
  const std::string path =
      index ? base + std::string(kSafetensorsIndexSuffix) : base + ".safetensors";
  if (!index) {
    for (bool mmap : {false, true}) {
      SCOPED_TRACE(mmap ? "mmap" : "pread");
      auto source = OpenFile(path, mmap);
      ASSERT_TRUE(source.ok()) << source.status();
      auto file = SafetensorsFile::Open(*source);
      ASSERT_FALSE(file.ok()) << path << " opens";
      EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << file.status();
      EXPECT_THAT(std::string(file.status().message()), ::testing::EndsWith(want));
      EXPECT_EQ(RuleOf(file.status()), rule) << file.status();
    }
  }
  auto checkpoint = SafetensorsCheckpoint::Open(path);
  ASSERT_FALSE(checkpoint.ok()) << path << " opens";
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kDataLoss) << checkpoint.status();
  EXPECT_THAT(std::string(checkpoint.status().message()), ::testing::EndsWith(want));
  EXPECT_EQ(RuleOf(checkpoint.status()), rule) << checkpoint.status();
}

// Runs a re-weighting case (S8-S12): Reweight of <stem>.safetensors for the
// program <stem>.manifest, with the options of <stem>.reweight.json
// ({"base": file name in the rules folder or null, "rename": [[from, to]]}),
// is refused with InvalidArgument naming the rule, and writes nothing; a
// warning rule's case (S11, S12) is written, with that warning.
void RunReweightCase(const std::string& rule, const std::string& base) {
  const nlohmann::json j = ReadJson(base + ".reweight.json");
  ReweightOptions options;
  if (j.contains("base") && !j["base"].is_null()) {
    options.base = RulesDir() + "/" + j["base"].get<std::string>();
  }
  for (const auto& r : j.value("rename", nlohmann::json::array())) {
    options.rename.emplace_back(r.at(0).get<std::string>(), r.at(1).get<std::string>());
  }
  BundlePaths program;
  program.manifest = base + ".manifest";
  const std::string out = ::testing::TempDir() + "/" + rule + "_reweight_case.ptd";
  std::error_code ec;
  fs::remove(out, ec);
  auto result = Reweight(base + ".safetensors", program, out, options);
  if (::ptd::IsWarningRule(rule)) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(result->report.HasWarning(rule)) << rule;
    EXPECT_TRUE(Exists(out)) << "the " << rule << " case was not written";
    fs::remove(out, ec);
    return;
  }
  ASSERT_FALSE(result.ok()) << "Reweight accepted the " << rule << " case";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr("(" + rule + ")"));
  EXPECT_EQ(RuleOf(result.status()), rule) << result.status();
  EXPECT_FALSE(Exists(out)) << "a refused re-weighting left " << out;
}

// Runs a signed-model case (A1-A7): a copy of the mlp model's folder (.ptd,
// .pte) signed by the tests' signer (shards of 1 KiB, SHA-256), broken as
// <stem>.signed.json's "mutation" says; RunVerify with the signature then
// reports that rule and no other, exit code 1.
void RunSignedCase(const std::string& rule, const std::string& path) {
  namespace st = ::ptd::testing;
  const std::string mutation = ReadJson(path).at("mutation").get<std::string>();
  st::TempDir dir, keys;
  const std::string model = dir.path() + "/model";
  fs::create_directories(model);
  fs::copy_file(DataPath("executorch/mlp.ptd"), model + "/mlp.ptd");
  fs::copy_file(DataPath("executorch/mlp.pte"), model + "/mlp.pte");
  const st::TestKey key = st::TestKey::Make();
  st::WriteFile(keys.File("key.pub"), key.public_pem);
  st::SignSpec spec{.method = "shards", .hash = "sha256", .shard_size = 1024};
  if (mutation == "ptd_not_signed") spec.ignore_paths.push_back("mlp.ptd");
  st::SignFolder(model, key, spec);
  const std::string sig = model + "/model.sig";
  if (mutation == "truncate_signature") {
    const std::string text = st::ReadFile(sig);
    st::WriteFile(sig, text.substr(0, text.size() / 2));
  } else if (mutation == "other_key") {
    st::WriteFile(keys.File("key.pub"), st::TestKey::Make().public_pem);
  } else if (mutation == "wrong_subject_digest" || mutation == "blake3") {
    nlohmann::json statement = st::StatementFor(model, spec);
    if (mutation == "blake3") {
      statement["predicate"]["serialization"]["hash_type"] = "blake3";
    } else {
      statement["subject"][0]["digest"]["sha256"] = std::string(64, 'a');
    }
    st::WriteFile(sig, st::KeyBundle(key, statement.dump()));
  } else if (mutation == "flip_weight_byte") {
    auto c = Container::Open(*OpenPreadFile(model + "/mlp.ptd"));
    ASSERT_TRUE(c.ok()) << c.status();
    const uint64_t at = (*c)->SegmentFileOffset((*c)->named_data().front().segment_index) + 3;
    std::vector<uint8_t> b = ReadFileBytes(model + "/mlp.ptd");
    b[at] ^= 0x10;
    st::WriteFileBytes(model + "/mlp.ptd", b);
  } else if (mutation == "extra_file") {
    st::WriteFile(model + "/extra.bin", "unsigned");
  } else if (mutation != "ptd_not_signed") {
    FAIL() << "unknown mutation '" << mutation << "' in " << path;
  }
  VerifyOptions options;
  options.paths.ptd = model + "/mlp.ptd";
  options.paths.pte = model + "/mlp.pte";
  options.signature = SignatureOptions{.signature = sig,
                                       .public_key = keys.File("key.pub"),
                                       .certificate_chain = "",
                                       .model_dir = ""};
  const VerifyOutcome out = RunVerify(options);
  EXPECT_EQ(out.exit_code(), 1) << Describe(out.report);
  EXPECT_THAT(out.report, HasError(rule)) << Describe(out.report);
  EXPECT_EQ(out.report.errors().size(), 1u) << Describe(out.report);
  EXPECT_FALSE(out.signature.verified);
  EXPECT_EQ(out.signature.rule.value_or(""), rule);
}

TEST_P(RuleCaseTest, AssertsItsRule) {
  const std::string stem = GetParam();
  const std::string rule = StemRule(stem);
  const std::string base = RulesDir() + "/" + stem;
  if (Exists(base + ".signed.json")) {
    RunSignedCase(rule, base + ".signed.json");
    return;
  }
  if (Exists(base + ".writer.json")) {
    RunWriterCase(rule, base + ".writer.json");
    return;
  }
  if (Exists(base + ".reweight.json")) {
    RunReweightCase(rule, base);
    return;
  }
  if (Exists(base + ".safetensors") || Exists(base + std::string(kSafetensorsIndexSuffix))) {
    RunSafetensorsCase(rule, base);
    return;
  }
  ASSERT_TRUE(Exists(base + ".ptd")) << "a verifier case needs " << stem << ".ptd";
  VerifyOptions options;
  options.paths.ptd = base + ".ptd";
  if (Exists(base + ".manifest")) options.paths.manifest = base + ".manifest";
  if (Exists(base + ".pte")) options.paths.pte = base + ".pte";
  if (Exists(base + ".verify.json")) {
    const nlohmann::json j = ReadJson(base + ".verify.json");
    options.digest = j.value("digest", false);
    options.digest_limit = j.value("digest_limit", kDefaultDigestLimit);
    options.stats = j.value("stats", false);
  }
  for (bool mmap : {false, true}) {
    options.paths.use_mmap = mmap;
    const VerifyOutcome out = RunVerify(options);
    const nlohmann::ordered_json out_json = VerifyJson(out);
    SCOPED_TRACE(std::string(mmap ? "mmap" : "pread") + "\n" + Describe(out.report));
    ASSERT_EQ(out.io_error(), nullptr) << out.io_error()->status;
    if (::ptd::IsWarningRule(rule)) {
      EXPECT_THAT(out.report, HasWarning(rule));
      EXPECT_TRUE(out.report.ok()) << "a warning-only case has errors";
      EXPECT_EQ(out.exit_code(), 0);
    } else if (rule == "X2") {
      // X2 is reported through the G rule it names (G1-G4 between a
      // manifest and this .ptd).
      EXPECT_THAT(out.report,
                  ::testing::AnyOf(HasError("G1"), HasError("G2"), HasError("G3"), HasError("G4")));
      EXPECT_EQ(out.exit_code(), 1);
    } else {
      EXPECT_THAT(out.report, HasError(rule));
      EXPECT_EQ(out.exit_code(), 1);
    }
    // The JSON names the rule too (what CI and users read).
    const auto& list = ::ptd::IsWarningRule(rule) ? out_json["warnings"] : out_json["errors"];
    if (rule != "X2") {
      EXPECT_TRUE(
          std::any_of(list.begin(), list.end(), [&](const auto& d) { return d["rule"] == rule; }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SpecRules, RuleCaseTest, ::testing::ValuesIn(Stems()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace ptd
