// The ptd-verify command line: exit codes, flags, the JSON object and the
// readable report (SPEC section 6).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/weight_writer.h"
#include "runtime/internal/utf8.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformancePath;
using ::ptd::testing::Count;
using ::ptd::testing::RunCommand;
using ::ptd::testing::TempDir;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::string Verify(const std::string& args) {
  return std::string(PTD_VERIFY_BINARY) + " " + args + " 2>&1";
}

const std::string kK01 = ConformancePath("files/k01_view_geometry.ptd");
const std::string kK01Manifest = ConformancePath("files/k01_view_geometry.manifest");
const std::string kK01Pte = ConformancePath("files/k01_view_geometry.pte");

TEST(CliTest, HelpAndVersionExitZero) {
  auto help = RunCommand(Verify("--help"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--manifest"));
  EXPECT_THAT(help.out, HasSubstr("--digest-limit"));
  auto version = RunCommand(Verify("--version"));
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, HasSubstr("ptd-verify"));
}

// Both tools put large blocks on huge pages unless the user opted out or
// chose a glibc.malloc.hugetlb setting of their own, and fix malloc's mmap
// threshold unless the environment sets one; --version says which.
TEST(CliTest, MallocUsesHugePagesUnlessOptedOut) {
  if (!cli::HugePageMallocAvailable()) {
    GTEST_SKIP() << "no glibc 2.35+, THP mode is never, or a sanitizer build";
  }
  for (const std::string binary : {PTD_VERIFY_BINARY, PTD_LOAD_BINARY}) {
    SCOPED_TRACE(binary);
    const std::string clean = "env -u GLIBC_TUNABLES -u PTD_MALLOC_HUGETLB ";
    auto on = RunCommand(clean + binary + " --version 2>&1");
    EXPECT_EQ(on.exit_code, 0);
    EXPECT_THAT(on.out, HasSubstr("malloc: blocks of 2 MiB and more on transparent huge pages"));
    auto out = RunCommand(clean + "PTD_MALLOC_HUGETLB=0 " + binary + " --version 2>&1");
    EXPECT_THAT(out.out, HasSubstr("malloc: default (4 KiB) pages"));
    auto own =
        RunCommand(clean + "GLIBC_TUNABLES=glibc.malloc.hugetlb=0 " + binary + " --version 2>&1");
    EXPECT_THAT(own.out, HasSubstr("malloc: glibc.malloc.hugetlb=0\n"));
    auto own_on =
        RunCommand(clean + "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 " + binary + " --version 2>&1");
    EXPECT_THAT(own_on.out, HasSubstr("malloc: glibc.malloc.hugetlb=1 (large blocks"));
    // Another tunable leaves the tools' own setting on.
    auto other = RunCommand(clean + "GLIBC_TUNABLES=glibc.malloc.tcache_count=8 " + binary +
                            " --version 2>&1");
    EXPECT_THAT(other.out, HasSubstr("malloc: blocks of 2 MiB and more on transparent huge pages"));
    // The mmap threshold is fixed unless the environment sets one.
    EXPECT_THAT(on.out, HasSubstr("malloc: mmap_threshold=2097152 (fixed)"));
    EXPECT_THAT(out.out, HasSubstr("malloc: mmap_threshold=2097152 (fixed)"));
    auto threshold = RunCommand(clean + "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536 " +
                                binary + " --version 2>&1");
    EXPECT_THAT(threshold.out, HasSubstr("malloc: mmap_threshold set by the environment"));
    EXPECT_THAT(threshold.out,
                HasSubstr("malloc: blocks of 2 MiB and more on transparent huge pages"));
    auto legacy = RunCommand(clean + "MALLOC_MMAP_THRESHOLD_=65536 " + binary + " --version 2>&1");
    EXPECT_THAT(legacy.out, HasSubstr("malloc: mmap_threshold set by the environment"));
    // A verification is the same with either setting.
    auto plain = RunCommand(clean + "PTD_MALLOC_HUGETLB=0 " + binary + " " + kK01 + " --manifest " +
                            kK01Manifest + " --json 2>/dev/null");
    auto huge = RunCommand(clean + binary + " " + kK01 + " --manifest " + kK01Manifest +
                           " --json 2>/dev/null");
    EXPECT_EQ(plain.exit_code, huge.exit_code);
    EXPECT_EQ(json::parse(plain.out)["ok"], json::parse(huge.out)["ok"]);
  }
}

// The tools set up their malloc in process: no re-exec (whose exec of
// /proc/self/exe named the process "exe" in ps, top and pgrep), and no
// GLIBC_TUNABLES handed down to what they run. A ptd-load that loads a small
// model over and over runs long enough to look at, read for up to 10 s, and
// again 0.3 s after it first shows its name (well past where a re-exec was).
TEST(CliTest, TheToolKeepsItsNameAndItsEnvironment) {
  if (!cli::HugePageMallocAvailable()) {
    GTEST_SKIP() << "THP mode is never, or a sanitizer build";
  }
  const std::string script =
      "env -u GLIBC_TUNABLES -u PTD_MALLOC_HUGETLB " + std::string(PTD_LOAD_BINARY) +
      " --repeat 100000 --device host --manifest " + kK01Manifest + " " + kK01 +
      " >/dev/null 2>&1 & p=$!; name=none; tunables=unread; "
      "for i in $(seq 1 1000); do "
      "  name=$(cat /proc/$p/comm 2>/dev/null); "
      "  if [ \"$name\" = ptd-load ]; then "
      "    sleep 0.3; name=$(cat /proc/$p/comm 2>/dev/null); "
      "    tunables=$(tr '\\0' '\\n' < /proc/$p/environ | grep -c '^GLIBC_TUNABLES='); break; "
      "  fi; sleep 0.01; "
      "done; kill -9 $p 2>/dev/null; wait $p 2>/dev/null; "
      "echo \"name=$name tunables=$tunables\"";
  const auto run = RunCommand(script);
  EXPECT_THAT(run.out, HasSubstr("name=ptd-load tunables=0\n"));
}

TEST(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCommand(Verify("--bogus " + kK01)).exit_code, 2);
  EXPECT_EQ(RunCommand(Verify("")).exit_code, 2);                    // No file.
  EXPECT_EQ(RunCommand(Verify(kK01 + " --manifest")).exit_code, 2);  // No value.
  EXPECT_EQ(RunCommand(Verify("--sm ninety " + kK01)).exit_code, 2);
}

TEST(CliTest, UnreadableFilesExitTwo) {
  auto r = RunCommand(Verify("/nonexistent/model.ptd"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent/model.ptd"));
  EXPECT_EQ(RunCommand(Verify("--manifest /nonexistent/m " + kK01)).exit_code, 2);
  TempDir dir;
  EXPECT_EQ(RunCommand(Verify(dir.path())).exit_code, 2);  // A directory.
  auto j = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json /nonexistent/x.ptd");
  EXPECT_EQ(j.exit_code, 2);
  const json parsed = json::parse(j.out);
  EXPECT_FALSE(parsed["ok"].get<bool>());
  // The same shape as any other report, so consumers need no special case.
  EXPECT_EQ(parsed["ptd"]["path"], "/nonexistent/x.ptd");
  EXPECT_TRUE(parsed["manifests"].is_array());
  EXPECT_EQ(parsed["errors"][0]["rule"], "I1");
  EXPECT_EQ(parsed["errors"][0]["file"], "/nonexistent/x.ptd");
  EXPECT_EQ(parsed["errors"][0]["code"], "NOT_FOUND");
}

TEST(CliTest, MissingFileErrorIsPrintedOnce) {
  // Readable mode: one line, on stderr (stdout and stderr together here).
  auto r = RunCommand(Verify("/nonexistent/model.ptd"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Count(r.out, "/nonexistent/model.ptd"), 1u) << r.out;
  EXPECT_EQ(Count(r.out, "ptd-verify:"), 1u) << r.out;
  auto stdout_only =
      RunCommand(std::string(PTD_VERIFY_BINARY) + " /nonexistent/model.ptd 2>/dev/null");
  EXPECT_EQ(stdout_only.out, "");
  // JSON mode: the JSON object on stdout, the message once on stderr.
  auto err_only =
      RunCommand(std::string(PTD_VERIFY_BINARY) + " --json /nonexistent/model.ptd 2>&1 >/dev/null");
  EXPECT_EQ(err_only.exit_code, 2);
  EXPECT_EQ(Count(err_only.out, "/nonexistent/model.ptd"), 1u) << err_only.out;
}

TEST(CliTest, ReadableReportEscapesNonUtf8Keys) {
  // C6: a key that is not UTF-8 (a raw 0x8c byte).
  auto r = RunCommand(
      Verify(::ptd::testing::DataPath("../fuzz/corpus/container/s02_invalid_utf8_key.ptd")));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(internal::IsValidUtf8(r.out)) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\xEF\xBF\xBD"));  // U+FFFD, as in the JSON.
}

TEST(CliTest, JsonHasEveryPart) {
  auto r = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --manifest " + kK01Manifest + " " +
                      kK01);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  for (const char* k : {"ok", "ptd", "manifests", "errors", "warnings"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  for (const char* k : {"path", "size", "version", "segment_base_offset", "segment_data_size",
                        "segments", "named_data"}) {
    EXPECT_TRUE(j["ptd"].contains(k)) << k;
  }
  const auto& w = j["manifests"][0]["weights"][0];
  for (const char* k : {"fqn", "storage_key", "dtype", "device_type", "storage_offset", "sizes",
                        "strides", "storage_nbytes", "required_nbytes"}) {
    EXPECT_TRUE(w.contains(k)) << k;
  }
  EXPECT_FALSE(w.contains("sha256"));  // Only with --digest.
  EXPECT_EQ(j["manifests"][0]["source"], "manifest");
  EXPECT_FALSE(j["manifests"][0].contains("selection"));  // Only with --sm.
  // k01 has a scalar view at offset 3 of a 4-float storage: warning G5.
  ASSERT_EQ(j["warnings"].size(), 1u);
  EXPECT_EQ(j["warnings"][0]["rule"], "G5");
  EXPECT_EQ(j["warnings"][0]["key"], "cuda_fqn_weight:cuda:layers.0.norm.scale");
}

TEST(CliTest, JsonAndReportNameTheManifestFormat) {
  const std::string k03 = ConformancePath("files/k03_released_fqn3.manifest");
  for (const auto& [manifest, format] :
       {std::pair{kK01Manifest, "ETCUDAFQN0"}, std::pair{k03, "ETCUDAFQN3"}}) {
    auto r =
        RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --manifest " + manifest + " " + kK01);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(r.out);
    const auto& m = j["manifests"][0];
    EXPECT_EQ(m["format"], format);
    // "format" comes right after "source" (SPEC section 6).
    auto it = m.begin();
    ASSERT_EQ(it.key(), "source");
    ++it;
    EXPECT_EQ(it.key(), "format");
    auto text = RunCommand(Verify("--manifest " + manifest + " " + kK01));
    // The heading names the manifest's file.
    EXPECT_THAT(text.out,
                HasSubstr("\nmanifest " + manifest + " (" + format + "): 1 variant, 12 weights"));
  }
}

TEST(CliTest, SmSelectsAVariantOrSaysNoneFits) {
  auto r =
      RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --sm 90 --pte " + kK01Pte + " " + kK01);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  const auto& m = j["manifests"][0];
  EXPECT_EQ(m["source"], "pte:forward:0");
  ASSERT_TRUE(m.contains("selection"));
  EXPECT_EQ(m["selection"]["sm"], 90);
  EXPECT_FALSE(m["selection"]["variant"].is_null());
  auto text = RunCommand(Verify("--sm 90 --pte " + kK01Pte + " " + kK01));
  EXPECT_THAT(text.out, HasSubstr("on sm 90: runs variant 0"));
}

TEST(CliTest, ReadableReportListsErrorsFirstThenWeights) {
  auto r = RunCommand(Verify("--manifest " +
                             ConformancePath("files/k10_clone_with_original_offset.manifest") +
                             " " + ConformancePath("files/k10_clone_with_original_offset.ptd")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("FAILED"));
  // The rule is the line's first column (said once, not again at the end).
  EXPECT_THAT(r.out,
              HasSubstr("  G2  weight 'x.rows': view requires 80 bytes from a 48-byte storage\n"));
  const size_t errors_at = r.out.find("1 error:");
  const size_t table_at = r.out.find("required segment manifest");
  ASSERT_NE(errors_at, std::string::npos);
  ASSERT_NE(table_at, std::string::npos);
  EXPECT_LT(errors_at, table_at);
  // required, the segment's bytes, the manifest's storage_nbytes.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("x.rows +80 +48 +48\n"));
}

TEST(CliTest, DigestLimitGivesWarningD1AndNullSha) {
  // A broadcast view gathers far more bytes than its storage holds.
  TempDir dir;
  const std::vector<uint8_t> storage(16, 1);
  CudaWeightWriter w("lib_so");
  ASSERT_TRUE(w.Add(WeightSpec{.fqn = "rope",
                               .dtype = 6,
                               .device_type = 1,
                               .value = {.storage = storage,
                                         .sizes = {4096, 4},
                                         .strides = {0, 1},
                                         .is_original_storage = true},
                               .properties = {.shape = {4096, 4}, .stride = {0, 1}}})
                  .ok());
  ASSERT_TRUE(w.Write(dir.File("m.ptd"), dir.File("m.manifest")).ok());
  auto r = RunCommand(std::string(PTD_VERIFY_BINARY) +
                      " --json --digest --digest-limit 1000 --manifest " + dir.File("m.manifest") +
                      " " + dir.File("m.ptd"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["manifests"][0]["weights"][0]["sha256"].is_null());
  ASSERT_FALSE(j["warnings"].empty());
  EXPECT_EQ(j["warnings"][0]["rule"], "D1");
  EXPECT_THAT(j["warnings"][0]["message"].get<std::string>(),
              HasSubstr("65536 bytes, over the digest limit of 1000"));
  // Without the limit, the digest is there.
  auto full = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --digest --manifest " +
                         dir.File("m.manifest") + " " + dir.File("m.ptd"));
  EXPECT_TRUE(json::parse(full.out)["manifests"][0]["weights"][0]["sha256"].is_string());
}

TEST(CliTest, ManifestChecksRunEvenWhenTheContainerIsUnreadable) {
  // H2 makes the .ptd unusable; G1/G2 need only the manifest and still run.
  TempDir dir;
  std::vector<uint8_t> ptd =
      ::ptd::testing::ReadFileBytes(ConformancePath("files/k10_clone_with_original_offset.ptd"));
  ptd[7] = '2';  // FT02.
  ::ptd::testing::WriteFileBytes(dir.File("bad.ptd"), ptd);
  auto r = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --manifest " +
                      ConformancePath("files/k10_clone_with_original_offset.manifest") + " " +
                      dir.File("bad.ptd"));
  EXPECT_EQ(r.exit_code, 1);
  const json j = json::parse(r.out);
  std::vector<std::string> rules;
  for (const auto& e : j["errors"]) rules.push_back(e["rule"]);
  EXPECT_THAT(rules, ::testing::ElementsAre("H2", "G2"));
  EXPECT_EQ(j["manifests"][0]["weights"][0]["required_nbytes"], 80);
}

TEST(CliTest, NonUtf8KeysStillGiveValidJson) {
  // Fuzz-found: a key that is not UTF-8 (C6) once aborted the JSON output.
  auto r =
      RunCommand(std::string(PTD_VERIFY_BINARY) + " --json " +
                 ::ptd::testing::DataPath("../fuzz/corpus/container/s02_invalid_utf8_key.ptd"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const json j = json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["errors"][0]["rule"], "C6");
}

TEST(CliTest, PreadAndMmapGiveTheSameReport) {
  const std::string args = " --json --digest --manifest " + kK01Manifest + " " + kK01;
  auto a = RunCommand(std::string(PTD_VERIFY_BINARY) + args);  // pread, the default.
  auto b = RunCommand(std::string(PTD_VERIFY_BINARY) + " --mmap" + args);
  auto c = RunCommand(std::string(PTD_VERIFY_BINARY) + " --pread" + args);
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(b.exit_code, 0);
  EXPECT_EQ(json::parse(a.out), json::parse(b.out));
  EXPECT_EQ(json::parse(a.out), json::parse(c.out));
}

TEST(CliTest, PreadAndMmapTogetherAreAUsageError) {
  auto r = RunCommand(std::string(PTD_VERIFY_BINARY) + " --pread --mmap " + kK01 + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
}

}  // namespace
}  // namespace ptd
