// Every case of the upstream-written conformance set (tests/data/conformance)
// gives its expected verdict, rule and digests: through the library, and
// through the ptd-verify binary's exit code and JSON.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using json = nlohmann::json;

// The ways a case's manifest can be read: "manifest" and/or "pte".
std::vector<std::string> Routes(const json& tc) {
  if (tc["kind"] != "cuda") return {"none"};
  if (tc.contains("via") && tc["via"] == "pte") return {"pte"};
  std::vector<std::string> r = {"manifest"};
  if (tc.contains("pte")) r.push_back("pte");
  return r;
}

VerifyOptions OptionsFor(const json& tc, const std::string& route) {
  VerifyOptions o;
  o.paths.ptd = ConformancePath(tc["ptd"]);
  o.digest = true;
  if (route == "manifest") o.paths.manifest = ConformancePath(tc["manifest"]);
  if (route == "pte") o.paths.pte = ConformancePath(tc["pte"]);
  return o;
}

std::set<std::string> Rules(const nlohmann::ordered_json& list) {
  std::set<std::string> rules;
  for (const auto& e : list) rules.insert(e["rule"].get<std::string>());
  return rules;
}
std::set<std::string> ErrorRules(const nlohmann::ordered_json& j) { return Rules(j["errors"]); }

// Every weight's "runtime_owned" is true exactly for the case's
// runtime-owned fqns, and those have no digest.
void ExpectRuntimeOwned(const json& tc, const nlohmann::ordered_json& j) {
  std::set<std::string> owned;
  if (tc.contains("runtime_owned")) {
    for (const auto& f : tc["runtime_owned"]) owned.insert(f.get<std::string>());
  }
  std::set<std::string> seen;
  for (const auto& m : j["manifests"]) {
    for (const auto& w : m["weights"]) {
      const std::string fqn = w["fqn"].get<std::string>();
      ASSERT_TRUE(w.contains("runtime_owned")) << fqn;
      EXPECT_EQ(w["runtime_owned"].get<bool>(), owned.count(fqn) > 0) << fqn;
      if (w["runtime_owned"].get<bool>()) {
        seen.insert(fqn);
        if (w.contains("sha256")) {
          EXPECT_TRUE(w["sha256"].is_null()) << fqn;
        }
      }
    }
  }
  if (!j["manifests"].empty()) {
    EXPECT_EQ(seen, owned);
  }
}

// Every rule of the case's warning_ids is among the warnings.
void ExpectWarnings(const json& tc, const nlohmann::ordered_json& j) {
  if (!tc.contains("warning_ids")) return;
  const std::set<std::string> got = Rules(j["warnings"]);
  for (const auto& rule : tc["warning_ids"]) {
    EXPECT_EQ(got.count(rule.get<std::string>()), 1u)
        << "expected warning " << rule << ", got " << j["warnings"].dump(1);
  }
}

// Parameterized by case name (readable test names); the case is looked up.
class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  static const json& Case(const std::string& name) {
    for (const auto& tc : ConformanceCases()) {
      if (tc["name"] == name) return tc;
    }
    throw std::runtime_error("no case " + name);
  }
};

TEST_P(ConformanceTest, GivesExpectedVerdictRulesAndDigests) {
  const json& tc = Case(GetParam());
  for (const std::string& route : Routes(tc)) {
    SCOPED_TRACE("route " + route);
    const VerifyOutcome out = RunVerify(OptionsFor(tc, route));
    const nlohmann::ordered_json out_json = VerifyJson(out);
    ASSERT_EQ(out.io_error(), nullptr) << out.io_error()->status;
    const auto& j = out_json;
    ExpectRuntimeOwned(tc, j);
    ExpectWarnings(tc, j);
    if (tc["expect"] == "reject") {
      EXPECT_EQ(out.exit_code(), 1);
      EXPECT_FALSE(j["ok"].get<bool>());
      const std::set<std::string> got = ErrorRules(j);
      bool any = false;
      for (const auto& rule : tc["rule_ids"]) any |= got.count(rule.get<std::string>()) > 0;
      EXPECT_TRUE(any) << "expected one of " << tc["rule_ids"].dump() << ", got "
                       << j["errors"].dump(1);
      continue;
    }
    EXPECT_EQ(out.exit_code(), 0) << j["errors"].dump(1);
    EXPECT_TRUE(j["ok"].get<bool>());
    if (tc.contains("named_data")) {
      ASSERT_EQ(j["ptd"]["named_data"].size(), tc["named_data"].size());
      for (const auto& want : tc["named_data"]) {
        bool found = false;
        for (const auto& got : j["ptd"]["named_data"]) {
          if (got["key"] != want["key"]) continue;
          found = true;
          EXPECT_EQ(got["segment_index"], want["segment_index"]) << want["key"];
          EXPECT_EQ(got["size"], want["size"]) << want["key"];
          EXPECT_EQ(json(got["layout"]), want["layout"]) << want["key"];
          EXPECT_EQ(got["sha256"], want["sha256"]) << want["key"];
        }
        EXPECT_TRUE(found) << want["key"];
      }
    }
    if (tc.contains("weights")) {
      ASSERT_EQ(j["manifests"].size(), 1u);
      const auto& m = j["manifests"][0];
      EXPECT_EQ(m["source"].get<std::string>().rfind(route == "pte" ? "pte:" : "manifest", 0), 0u);
      ASSERT_EQ(m["weights"].size(), tc["weights"].size());
      for (const auto& want : tc["weights"]) {
        // Matched by fqn (unique within a manifest), not by position.
        const auto match = std::find_if(m["weights"].begin(), m["weights"].end(),
                                        [&](const auto& w) { return w["fqn"] == want["fqn"]; });
        ASSERT_NE(match, m["weights"].end()) << want["fqn"];
        const auto& got = *match;
        for (auto it = want.begin(); it != want.end(); ++it) {
          EXPECT_EQ(json(got[it.key()]), it.value()) << want["fqn"] << " field " << it.key();
        }
      }
    }
  }
}

TEST_P(ConformanceTest, BinaryExitCodeAndJsonAgree) {
  const json& tc = Case(GetParam());
  const int want = tc["expect"] == "ok" ? 0 : 1;
  for (const std::string& route : Routes(tc)) {
    // Appended piece by piece: `"literal" + std::string` inserts at the
    // front, which GCC 12 at -O3 flags as a memcpy overlap (-Wrestrict).
    std::string cmd = PTD_VERIFY_BINARY;
    cmd += " --json --digest";
    if (route == "manifest") {
      cmd += " --manifest ";
      cmd += ConformancePath(tc["manifest"]);
    }
    if (route == "pte") {
      cmd += " --pte ";
      cmd += ConformancePath(tc["pte"]);
    }
    cmd += " ";
    cmd += ConformancePath(tc["ptd"]);
    const auto r = ::ptd::testing::RunCommand(cmd);
    EXPECT_EQ(r.exit_code, want) << cmd;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["ok"].get<bool>(), want == 0);
    EXPECT_EQ(j["errors"].empty(), want == 0);
    for (const auto& e : j["errors"]) {
      EXPECT_TRUE(e.contains("rule") && e.contains("message") && e.contains("file"));
    }
  }
}

std::vector<std::string> AllCases() {
  std::vector<std::string> names;
  for (const auto& tc : ConformanceCases()) names.push_back(tc["name"]);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Upstream, ConformanceTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// The same weights and verdicts through --pte as through --manifest.
TEST(ConformanceCrossTest, PteAndManifestAgree) {
  int compared = 0;
  for (const auto& tc : ConformanceCases()) {
    if (!tc.contains("pte") || tc.contains("via")) continue;
    const VerifyOutcome a = RunVerify(OptionsFor(tc, "manifest"));
    const nlohmann::ordered_json a_json = VerifyJson(a);
    const VerifyOutcome b = RunVerify(OptionsFor(tc, "pte"));
    const nlohmann::ordered_json b_json = VerifyJson(b);
    EXPECT_EQ(a.exit_code(), b.exit_code());
    ASSERT_EQ(a_json["manifests"].size(), 1u);
    ASSERT_EQ(b_json["manifests"].size(), 1u);
    EXPECT_EQ(a_json["manifests"][0]["weights"], b_json["manifests"][0]["weights"]);
    EXPECT_EQ(a_json["manifests"][0]["variants"], b_json["manifests"][0]["variants"]);
    ++compared;
  }
  EXPECT_GE(compared, 1);
}

}  // namespace
}  // namespace ptd
