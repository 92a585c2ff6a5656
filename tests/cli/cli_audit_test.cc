// The command-line audit (issue 21): hostile inputs never hang or abort the
// tools, stdout write errors are exit 2, every failure in --json is one
// object whose errors carry rule, code and file, and the readable report is
// bounded, labeled and says each thing once.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/ptd_writer.h"
#include "ptd/verify.h"
#include "tests/testing/test_util.h"
#include "verifier/cli_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformancePath;
using ::ptd::testing::Count;
using ::ptd::testing::DataPath;
using ::ptd::testing::RunCommand;
using ::ptd::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

const std::string kK01 = ConformancePath("files/k01_view_geometry.ptd");
const std::string kK01Manifest = ConformancePath("files/k01_view_geometry.manifest");
const std::string kK01Pte = ConformancePath("files/k01_view_geometry.pte");

// Each tool run under `timeout`: a hang is exit 124, never a stuck test.
std::string Verify(const std::string& args) {
  return "timeout 20 " + std::string(PTD_VERIFY_BINARY) + " " + args;
}
std::string Load(const std::string& args) {
  return "timeout 20 " + std::string(PTD_LOAD_BINARY) + " " + args;
}

// A sparse file of `size` bytes starting with `head`.
void SparseFile(const std::string& path, const std::string& head, uint64_t size) {
  testing::WriteFileBytes(path, std::vector<uint8_t>(head.begin(), head.end()));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
}

constexpr uint64_t k100GiB = uint64_t{100} << 30;

// The tools under test are built with the same flags as this test: under
// ASan or TSan their shadow memory reserves terabytes of address space, so
// `ulimit -v` kills them before main().
const bool kSanitized = cli::BuiltWithSanitizer();

// A shell prefix that caps what the command may allocate at `mib` MiB: an
// address-space limit, or under a sanitizer its allocator's own cap (an
// allocation over it is a sanitizer report and a non-zero exit, which the
// tests' expected exit codes rule out just as well).
std::string MemoryCap(uint64_t mib) {
  if (!kSanitized) return absl::StrCat("ulimit -v ", mib * 1024, "; ");
  return absl::StrCat("ASAN_OPTIONS=$ASAN_OPTIONS:max_allocation_size_mb=", mib,
                      " TSAN_OPTIONS=$TSAN_OPTIONS:max_allocation_size_mb=", mib, " ");
}

TEST(CliAuditTest, FifoIsRejectedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& cmd :
       {Verify(fifo), Verify("--manifest " + fifo + " " + kK01),
        Verify("--pte " + fifo + " " + kK01), Load(fifo), Load("--manifest " + fifo + " " + kK01),
        Load("--pte " + fifo + " " + kK01)}) {
    SCOPED_TRACE(cmd);
    const auto r = RunCommand(cmd + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.out;  // 124 would be the hang.
    EXPECT_THAT(r.out, AllOf(HasSubstr(fifo), HasSubstr("not a regular file (a FIFO)")));
  }
}

TEST(CliAuditTest, HugeSparseManifestIsJudgedByItsMagic) {
  TempDir dir;
  const std::string zeros = dir.File("sparse.bin");
  SparseFile(zeros, "", k100GiB);
  // Under a 2 GiB address-space limit: reading the file whole would fail.
  for (const std::string& cmd : {Verify("--manifest " + zeros + " " + kK01),
                                 Load("--device host --manifest " + zeros + " " + kK01)}) {
    SCOPED_TRACE(cmd);
    const auto r = RunCommand(MemoryCap(2048) + cmd + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.out;  // M1, never 134 (abort).
    EXPECT_THAT(r.out, HasSubstr("  M1  bad manifest magic"));
    EXPECT_THAT(r.out, HasSubstr("expected 'ETCUDAFQN0' or 'ETCUDAFQN3'"));
  }
}

TEST(CliAuditTest, HugeManifestWithAGoodMagicIsRefusedNotRead) {
  TempDir dir;
  const std::string big = dir.File("big.manifest");
  SparseFile(big, "ETCUDAFQN3", k100GiB);
  for (const std::string& cmd : {Verify("--manifest " + big + " " + kK01),
                                 Load("--device host --manifest " + big + " " + kK01)}) {
    SCOPED_TRACE(cmd);
    const auto r = RunCommand(MemoryCap(2048) + cmd + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_THAT(r.out, AllOf(HasSubstr(big), HasSubstr("the manifest is 107374182400 bytes"),
                             HasSubstr("(1 GiB) limit"), HasSubstr("(I1)")));
  }
  const auto j = RunCommand(Verify("--json --manifest " + big + " " + kK01) + " 2>/dev/null");
  EXPECT_EQ(j.exit_code, 2);
  const json parsed = json::parse(j.out);
  ASSERT_FALSE(parsed["errors"].empty());
  EXPECT_EQ(parsed["errors"].back()["rule"], "I1");
  EXPECT_EQ(parsed["errors"].back()["code"], "RESOURCE_EXHAUSTED");
  EXPECT_EQ(parsed["errors"].back()["file"], big);
}

TEST(CliAuditTest, HugeSparsePteNeverAborts) {
  TempDir dir;
  // A program identifier and no extended header, 100 GiB long.
  const std::string pte = dir.File("huge.pte");
  SparseFile(pte, std::string("\0\0\0\0ET12", 8), k100GiB);
  const auto r = RunCommand(MemoryCap(2048) + Verify("--pte " + pte + " " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;  // Never 134 (abort).
  EXPECT_THAT(r.out, HasSubstr("  P1  "));
}

TEST(CliAuditTest, OutOfMemoryIsExitTwoWithOneLine) {
  if (kSanitized) {
    // ASan's and TSan's operator new report and abort where it would throw.
    GTEST_SKIP() << "a sanitizer's allocator aborts on exhaustion instead of throwing "
                    "std::bad_alloc, so the tool's own out-of-memory path cannot run";
  }
  TempDir dir;
  // A 600 MiB manifest (under the 1 GiB cap) read under a 400 MiB limit.
  const std::string m = dir.File("m.manifest");
  SparseFile(m, "ETCUDAFQN3", uint64_t{600} << 20);
  const auto r = RunCommand(MemoryCap(400) + Verify("--manifest " + m + " " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("ptd-verify: out of memory"));
}

TEST(CliAuditTest, WriteErrorsOnStdoutAreExitTwo) {
  for (const std::string& cmd :
       {Verify("--json " + kK01), Verify(kK01), Load("--device host --json " + kK01),
        Load("--device host " + kK01), Verify("--help"), Load("--help")}) {
    SCOPED_TRACE(cmd);
    const auto r = RunCommand(cmd + " 2>&1 >/dev/full");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("write error: No space left on device"));
  }
}

TEST(CliAuditTest, FqnNeedsAManifest) {
  const auto r = RunCommand(Load("--device host --fqn nope " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--fqn needs --manifest or --pte"));
}

TEST(CliAuditTest, TheLoaderRefusesFqnsWithoutAManifest) {
  auto w = LoadWeights(BundlePaths{.ptd = kK01}, std::make_shared<HostDevice>(),
                       LoadOptions{.fqns = {"layers.0.attn.q"}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w.status().message()),
              AllOf(HasSubstr("'layers.0.attn.q'"), HasSubstr("no manifest")));
  // With one, the weight loads.
  auto ok = LoadWeights(BundlePaths{.ptd = kK01, .manifest = kK01Manifest},
                        std::make_shared<HostDevice>(), LoadOptions{.fqns = {"layers.0.attn.q"}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->weights().size(), 1u);
}

TEST(CliAuditTest, LoadFailuresAreOneJsonObjectWithRuleCodeAndFile) {
  // An unknown weight.
  auto r =
      RunCommand(Load("--device host --json --fqn nope --manifest " + kK01Manifest + " " + kK01) +
                 " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  json j = json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  ASSERT_EQ(j["errors"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["errors"][0]["rule"], "I2");
  EXPECT_EQ(j["errors"][0]["code"], "NOT_FOUND");
  EXPECT_THAT(j["errors"][0]["message"].get<std::string>(), HasSubstr("'nope'"));
  // A device that cannot be opened: stdout still has the object.
  r = RunCommand(Load("--json --device cuda:99 " + kK01) + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  j = json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["rule"], "I2");
  EXPECT_TRUE(j["errors"][0].contains("code"));
  EXPECT_EQ(j["ptd"]["path"], kK01);
  // An unreadable input: rule I1 naming the file.
  r = RunCommand(Load("--json --device host /nonexistent/x.ptd") + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  j = json::parse(r.out);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["rule"], "I1");
  EXPECT_EQ(j["errors"][0]["code"], "NOT_FOUND");
  EXPECT_EQ(j["errors"][0]["file"], "/nonexistent/x.ptd");
}

TEST(CliAuditTest, UnreadableInputIsSaidOnceOnStderrWithTheRightName) {
  TempDir dir;
  const auto out_only = RunCommand(Load("--device host " + dir.path()) + " 2>/dev/null");
  EXPECT_EQ(out_only.exit_code, 2);
  EXPECT_EQ(out_only.out, "");
  const auto both = RunCommand(Load("--device host " + dir.path()) + " 2>&1");
  EXPECT_EQ(Count(both.out, dir.path()), 1u) << both.out;
  EXPECT_THAT(both.out,
              AllOf(HasSubstr("ptd-load: cannot read input"),
                    HasSubstr("not a regular file (a directory)"), Not(HasSubstr("ptd-verify"))));
}

TEST(CliAuditTest, NoDriverIsSaidPlainly) {
#ifndef PTD_LOAD_HAS_CUDA
  GTEST_SKIP() << "built without CUDA: --device cuda is a usage error here";
#else
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_LAZY);
  if (libcuda != nullptr) ::dlclose(libcuda);
  if (libcuda != nullptr || ::access("/dev/nvidiactl", F_OK) == 0) {
    GTEST_SKIP() << "an NVIDIA driver is present";
  }
  const auto r = RunCommand(Load("--device cuda " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no NVIDIA driver found"));
  EXPECT_THAT(r.out, Not(HasSubstr("insufficient")));
#endif
}

TEST(CliAuditTest, FilesInTheWrongPlaceSayWhatTheyAre) {
  // A manifest as the .ptd.
  auto r = RunCommand(Verify(kK01Manifest) + " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("hint: this is a CUDA weight manifest (ETCUDAFQN0): pass it "
                               "with --manifest"));
  // A .ptd as --manifest.
  r = RunCommand(Verify("--json --manifest " + kK01 + " " + kK01));
  EXPECT_EQ(r.exit_code, 1);
  json j = json::parse(r.out);
  ASSERT_FALSE(j["errors"].empty());
  EXPECT_EQ(j["errors"][0]["rule"], "M1");
  EXPECT_EQ(j["errors"][0]["file"], kK01);
  EXPECT_THAT(j["errors"][0]["hint"].get<std::string>(),
              HasSubstr("this is a .ptd weight container"));
  // A .pte as --manifest.
  r = RunCommand(Verify("--manifest " + kK01Pte + " " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("hint: this is an ExecuTorch program (.pte, 'ET12'): pass it "
                               "with --pte"));
}

TEST(CliAuditTest, AContainerThatCannotBeParsedIsNullNotEmpty) {
  auto r = RunCommand(Verify("--json " + kK01Manifest));
  EXPECT_EQ(r.exit_code, 1);
  const json j = json::parse(r.out);
  EXPECT_TRUE(j["ptd"]["segments"].is_null());
  EXPECT_TRUE(j["ptd"]["named_data"].is_null());
  r = RunCommand(Verify(kK01Manifest));
  EXPECT_THAT(r.out, HasSubstr("not parsed"));
  EXPECT_THAT(r.out, Not(HasSubstr("0 segments")));
}

// A .ptd with `n` one-byte keys.
std::string ManyKeys(const TempDir& dir, int n) {
  PtdWriter w;
  for (int i = 0; i < n; ++i) {
    const uint8_t b[4] = {static_cast<uint8_t>(i), 1, 2, 3};
    EXPECT_TRUE(w.Add("key" + std::to_string(i), b).ok());
  }
  const std::string path = dir.File("many.ptd");
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

TEST(CliAuditTest, LongTablesEndInASummaryRowAndTheVerdict) {
  TempDir dir;
  const std::string ptd = ManyKeys(dir, 80);
  auto r = RunCommand(Verify(ptd));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("... and 30 more keys; --all lists them"));
  EXPECT_THAT(r.out, Not(HasSubstr("key79")));
  // The verdict is the last line too.
  const std::string verdict = ptd + ": OK (0 errors, 0 warnings)\n";
  EXPECT_EQ(Count(r.out, verdict), 2u);
  EXPECT_EQ(r.out.substr(r.out.size() - verdict.size()), verdict);
  r = RunCommand(Verify("--all " + ptd));
  EXPECT_THAT(r.out, HasSubstr("key79"));
  EXPECT_THAT(r.out, Not(HasSubstr("more keys")));
  r = RunCommand(Verify("--json " + ptd));
  EXPECT_EQ(json::parse(r.out)["ptd"]["named_data"].size(), 80u);  // Complete.
}

TEST(CliAuditTest, LoadOfAFailingFileBoundsItsReportToo) {
  TempDir dir;
  const std::string ptd = ManyKeys(dir, 80);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(ptd);
  bytes.resize(bytes.size() - 2);  // The data region now ends past the file: a broken rule.
  testing::WriteFileBytes(ptd, bytes);
  auto r = RunCommand(Load("--device host " + ptd));
  ASSERT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("... and 30 more keys; --all lists them"));
  r = RunCommand(Load("--device host --all " + ptd));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("key79"));
}

TEST(CliAuditTest, ReadableReportSaysEachThingOnceWithUnitsAndLabels) {
  const auto r = RunCommand(Verify("--manifest " + DataPath("rules/G2_view_past_storage.manifest") +
                                   " " + DataPath("rules/G2_view_past_storage.ptd")));
  EXPECT_EQ(r.exit_code, 1);
  // The rule once per line: in its column, not again at the end.
  EXPECT_THAT(r.out, HasSubstr("  G2  "));
  EXPECT_THAT(r.out, Not(HasSubstr("(G2)")));
  EXPECT_THAT(r.out, HasSubstr("1 error:"));
  EXPECT_THAT(r.out, Not(HasSubstr("(s)")));
  // The heading names the manifest file.
  EXPECT_THAT(r.out, HasSubstr("\nmanifest " + DataPath("rules/G2_view_past_storage.manifest") +
                               " (ETCUDAFQN"));
  EXPECT_THAT(r.out, HasSubstr("file offset"));
  EXPECT_THAT(r.out, HasSubstr("offset (elements)"));
  EXPECT_THAT(r.out, Not(HasSubstr("sha256")));  // No empty column without --digest.
  EXPECT_THAT(RunCommand(Verify("--digest " + kK01)).out, HasSubstr("sha256"));
  // Sizes carry units.
  EXPECT_THAT(RunCommand(Verify(kK01)).out, HasSubstr("2456 bytes (2.4 KiB)"));
}

TEST(CliAuditTest, WeightTableShowsTheSegmentsSizeBesideTheManifests) {
  const auto r = RunCommand(Verify("--manifest " +
                                   ConformancePath("files/k12_storage_size_mismatch.manifest") +
                                   " " + ConformancePath("files/k12_storage_size_mismatch.ptd")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("required segment manifest\n"));
  // The view needs 48, the segment holds 40 (what G3 says), the manifest says 48.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("x.rows +48 +40 +48\n"));
}

TEST(CliAuditTest, HelpShowsPlaceholdersAndBothManifestFormats) {
  for (const char* tool : {PTD_VERIFY_BINARY, PTD_LOAD_BINARY}) {
    const auto r = RunCommand(std::string(tool) + " --help");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, HasSubstr("--manifest FILE"));
    EXPECT_THAT(r.out, HasSubstr("--pte FILE"));
    EXPECT_THAT(r.out, HasSubstr("ETCUDAFQN0 or ETCUDAFQN3"));
  }
}

TEST(CliAuditTest, ATypoSuggestsTheNearFlag) {
  for (const char* tool : {PTD_VERIFY_BINARY, PTD_LOAD_BINARY}) {
    const auto r = RunCommand(std::string(tool) + " --manifst x " + kK01 + " 2>&1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.out, HasSubstr("did you mean --manifest?"));
  }
}

TEST(CliAuditTest, DigestLimitMustBeAByteCount) {
  for (const std::string bad : {"-5", "18446744073709551616", "1e9", "12abc", " 5"}) {
    const auto r = RunCommand(Verify("--digest --digest-limit '" + bad + "' " + kK01) + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("--digest-limit")) << bad;
  }
  EXPECT_EQ(RunCommand(Verify("--digest --digest-limit 18446744073709551615 " + kK01)).exit_code,
            0);
  const auto d1 = RunCommand(
      Verify("--json --digest --digest-limit 0 --manifest " + kK01Manifest + " " + kK01));
  EXPECT_THAT(d1.out, HasSubstr("\"D1\""));  // 0 is honoured: every view is over it.
}

TEST(CliAuditTest, FlagsWithoutEffectAreSaid) {
  auto r = RunCommand(Verify("--digest-limit 5 " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("note: --digest-limit has no effect without --digest"));
  r = RunCommand(Verify("--sm 90 " + kK01) + " 2>&1");
  EXPECT_THAT(r.out, HasSubstr("note: --sm has no effect without --manifest or --pte"));
  r = RunCommand(Load("--device host --sm 90 " + kK01) + " 2>&1");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("note: --sm has no effect without --manifest or --pte"));
}

TEST(CliAuditTest, ManifestAndPteCombineInBothTools) {
  const std::string args = "--json --manifest " + kK01Manifest + " --pte " + kK01Pte + " " + kK01;
  const auto v = RunCommand(Verify(args) + " 2>/dev/null");
  const auto l = RunCommand(Load("--device host " + args) + " 2>/dev/null");
  for (const auto* r : {&v, &l}) {
    ASSERT_EQ(r->exit_code, 0) << r->out;
    EXPECT_EQ(json::parse(r->out)["manifests"].size(), 2u);
  }
}

TEST(CliAuditTest, LoadListsItsWarnings) {
  const auto r = RunCommand(Load("--device host --manifest " +
                                 DataPath("rules/G5_unreached_tail_bytes.manifest") + " " +
                                 DataPath("rules/G5_unreached_tail_bytes.ptd")));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("verified (1 warning)"));
  EXPECT_THAT(r.out, HasSubstr("  warning G5: "));
}

TEST(CliAuditTest, WriteDemoIntoAMissingDirectoryIsAUsageError) {
#ifndef PTD_WRITE_DEMO_BINARY
  GTEST_SKIP() << "examples not built (PTD_BUILD_EXAMPLES=OFF)";
#else
  TempDir dir;
  const auto r =
      RunCommand(std::string(PTD_WRITE_DEMO_BINARY) + " " + dir.File("absent") + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no such directory"));
  EXPECT_THAT(r.out, Not(HasSubstr(".tmp")));
  EXPECT_EQ(RunCommand(std::string(PTD_WRITE_DEMO_BINARY) + " " + dir.path()).exit_code, 0);
#endif
}

TEST(CliAuditTest, ProgressLineFitsTheTerminalWithPhaseAmountRateAndEta) {
  cli::ProgressBar bar;
  bar.Start("loading");
  const uint64_t total = uint64_t{8} << 30;
  const std::string wide = bar.Line(total / 2, total, 2.0, 120);
  EXPECT_LE(wide.size(), 119u);
  EXPECT_THAT(wide, AllOf(HasSubstr("loading ["), HasSubstr(" 50% 4.00 GiB/8.00 GiB"),
                          HasSubstr("2.00 GiB/s"), HasSubstr("ETA 2 s")));
  for (int cols : {60, 40, 20, 5}) {
    SCOPED_TRACE(cols);
    EXPECT_LE(bar.Line(total / 2, total, 2.0, cols).size(), static_cast<size_t>(cols - 1));
  }
  EXPECT_THAT(bar.Line(total / 2, total, 2.0, 60), Not(HasSubstr("[")));  // No room for a bar.
  bar.Start("digests", cli::ProgressBar::kItems);
  EXPECT_THAT(bar.Line(30, 120, 3.0, 100), AllOf(HasSubstr("digests"), HasSubstr(" 25% 30/120"),
                                                 HasSubstr("10/s"), HasSubstr("ETA 9 s")));
}

TEST(CliAuditTest, DigestProgressCountsEveryKeyAndWeight) {
  VerifyOptions o{.paths = {.ptd = kK01, .manifest = kK01Manifest}, .digest = true};
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  o.digest_progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  const VerifyOutcome out = RunVerify(o);
  ASSERT_EQ(out.exit_code(), 0);
  ASSERT_EQ(calls.size(), 24u);  // 12 keys and 12 weights.
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{1}, uint64_t{24}));
  EXPECT_EQ(calls.back(), std::make_pair(uint64_t{24}, uint64_t{24}));
  o.digest = false;
  calls.clear();
  (void)RunVerify(o);
  EXPECT_TRUE(calls.empty());  // No digests, no progress.
}

TEST(CliAuditTest, ProgressBarIsErasedUnderTmux) {
  if (RunCommand("command -v tmux >/dev/null 2>&1").exit_code != 0) {
    GTEST_SKIP() << "tmux is not installed (apt-get install -y tmux)";
  }
  TempDir dir;
  // 96 MiB in 24 keys, loaded 40 times on a 40-column terminal, the bar
  // drawn at every update (PTD_PROGRESS_DELAY_MS=0).
  const std::string ptd = dir.File("big.ptd");
  {
    PtdWriter w;
    std::vector<uint8_t> b(size_t{4} << 20);
    for (int i = 0; i < 24; ++i) {
      b[0] = static_cast<uint8_t>(i);
      ASSERT_TRUE(w.Add("key" + std::to_string(i), b).ok());
    }
    ASSERT_TRUE(w.Write(ptd).ok());
  }
  const std::string session = "ptd_cli_audit_" + std::to_string(::getpid());
  const std::string done = dir.File("done");
  const std::string cmd = "PTD_PROGRESS_DELAY_MS=0 " + std::string(PTD_LOAD_BINARY) +
                          " --device host --threads 1 --digest --repeat 40 " + ptd +
                          " >/dev/null; touch " + done;
  ASSERT_EQ(RunCommand("tmux new-session -d -s " + session + " -x 40 -y 10 '" + cmd + "; sleep 30'")
                .exit_code,
            0);
  bool saw_bar = false;
  for (int i = 0; i < 600 && ::access(done.c_str(), F_OK) != 0; ++i) {
    const auto pane = RunCommand("tmux capture-pane -p -t " + session);
    for (const std::string& line : std::vector<std::string>(absl::StrSplit(pane.out, '\n'))) {
      if (line.find("loading") != std::string::npos && line.find('%') != std::string::npos) {
        saw_bar = true;
        EXPECT_LE(line.size(), 39u) << line;  // One line that fits.
      }
    }
    ::usleep(50 * 1000);
  }
  const auto after = RunCommand("tmux capture-pane -p -t " + session);
  RunCommand("tmux kill-session -t " + session);
  ASSERT_TRUE(saw_bar) << "no progress line was seen in 40 loads";
  EXPECT_THAT(after.out, Not(HasSubstr("%")));  // Erased at the end.
}

}  // namespace
}  // namespace ptd
