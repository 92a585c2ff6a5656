// Golden outputs: the JSON object and the readable report of every
// conformance case, by every route its manifest can be read (none, the
// standalone manifest, the .pte), with and without digests, byte for byte
// against tests/data/golden/. They pin what ptd-verify prints, so that a
// change to how the report is built (not to what it says) shows here first.
//
// The conformance folder's absolute path is written as "<conformance>".
// Regenerate after a deliberate change of output:
//   PTD_UPDATE_GOLDENS=1 build/tests/ptd_tests --gtest_filter='GoldenTest.*'
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/verify.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::DataPath;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::WriteFileBytes;

struct Golden {
  std::string name;  // File name under tests/data/golden/.
  std::string text;  // What it must hold.
};

std::vector<std::string> Routes(const nlohmann::json& tc) {
  if (tc["kind"] != "cuda") return {"none"};
  std::vector<std::string> routes;
  if (tc.contains("manifest")) routes.push_back("manifest");
  if (tc.contains("pte")) routes.push_back("pte");
  return routes;
}

std::string Normalized(const std::string& text) {
  return absl::StrReplaceAll(text, {{ConformancePath(""), "<conformance>/"}});
}

// Every golden of one case.
std::vector<Golden> GoldensOf(const nlohmann::json& tc) {
  std::vector<Golden> out;
  for (const std::string& route : Routes(tc)) {
    for (const bool digest : {false, true}) {
      VerifyOptions o;
      o.paths.ptd = ConformancePath(tc["ptd"]);
      if (route == "manifest") o.paths.manifest = ConformancePath(tc["manifest"]);
      if (route == "pte") o.paths.pte = ConformancePath(tc["pte"]);
      o.digest = digest;
      const std::string stem =
          tc["name"].get<std::string>() + "." + route + (digest ? ".digest" : "");
      const VerifyOutcome full = RunVerify(o);
      out.push_back({stem + ".json", Normalized(FormatJson(full))});
      out.push_back({stem + ".txt", Normalized(FormatText(full))});
      // The readable report as ptd-verify builds it: the first rows only.
      o.list_limit = 2;
      const VerifyOutcome cut = RunVerify(o);
      out.push_back({stem + ".rows2.txt",
                     Normalized(FormatText(
                         cut, TextOptions{.max_rows = 2, .names = cli::ToolInputNames()}))});
    }
  }
  return out;
}

TEST(GoldenTest, EveryConformanceCaseReportsAsBefore) {
  const bool update = std::getenv("PTD_UPDATE_GOLDENS") != nullptr;
  size_t checked = 0;
  for (const auto& tc : ConformanceCases()) {
    for (const Golden& g : GoldensOf(tc)) {
      const std::string path = DataPath("golden/" + g.name);
      const std::vector<uint8_t> want(g.text.begin(), g.text.end());
      if (update) {
        WriteFileBytes(path, want);
        continue;
      }
      const std::vector<uint8_t> have = ReadFileBytes(path);
      EXPECT_TRUE(have == want) << g.name << " differs from what the verifier prints now:\n"
                                << g.text;
      ++checked;
    }
  }
  if (!update) {
    EXPECT_GT(checked, 100u);
  }
}

}  // namespace
}  // namespace ptd
