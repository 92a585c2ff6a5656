// ptd-verify: checks an ExecuTorch CUDA-backend .ptd (and optionally its
// manifest or .pte) against every rule of docs/SPEC.md and says exactly which
// rule is broken and where.
//
// Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or unreadable
// input (including a stdout that cannot be written, and out of memory).
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"

#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"
#include "verifier/cli_util.h"

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

namespace {

// What the command line asks for.
struct Args {
  ptd::VerifyOptions options;
  bool json_out = false;
  bool all_rows = false;
};

// Parses the command line into `args`; nullopt to go on, else the exit code
// (help, version, a usage error).
std::optional<int> Parse(int argc, char** argv, Args* args) {
  ptd::VerifyOptions& options = args->options;
  bool use_pread = false;
  uint32_t sm = 0;
  std::string digest_limit;

  CLI::App app(
      "Verifies an ExecuTorch .ptd weight file: the container (H*, C*), and "
      "with --manifest and/or --pte the CUDA weight manifests and every view's "
      "geometry (M*, G*, X*, P*).\n"
      "Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or "
      "unreadable input.",
      "ptd-verify");
  ptd::cli::SetUp(app, PTD_VERSION, /*malloc_lines=*/true);
  app.add_option("ptd", options.paths.ptd, "the .ptd file")->required()->type_name("FILE.ptd");
  auto* manifest =
      app.add_option("--manifest")->description(ptd::cli::ManifestFlagHelp())->type_name("FILE");
  auto* pte =
      app.add_option("--pte", "a .pte whose CUDA delegates carry manifests")->type_name("FILE");
  auto* sm_opt = app.add_option("--sm", sm,
                                "compute capability (e.g. 90): report which "
                                "variant each manifest would run (needs --manifest or --pte)")
                     ->type_name("N");
  app.add_flag("--json", args->json_out, "print one JSON object on stdout (always complete)");
  app.add_flag("--all", args->all_rows,
               "list every key and weight (default: the first 50 of each)");
  app.add_flag("--digest", options.digest,
               "add sha256 of each key's bytes and each view's elements");
  app.add_flag("--stats", options.stats,
               "add NaN and Inf counts, min and max of each floating weight "
               "(F16, BF16, F32, F64); NaN or Inf is warning N1");
  auto* limit_opt =
      app.add_option("--digest-limit", digest_limit,
                     "with --digest or --stats: skip views that gather more bytes than "
                     "this (warning D1); default 1073741824 (1 GiB)")
          ->type_name("BYTES")
          ->check(CLI::Validator(
              [](std::string& v) -> std::string {
                uint64_t n;
                return ptd::cli::ParseByteCount(v, &n)
                           ? std::string()
                           : "a byte count from 0 to 18446744073709551615 (2^64 - 1)";
              },
              ""));
  auto* pread_flag = app.add_flag(
      "--pread", use_pread, "read with pread(2) (the default; a file that shrinks is exit 2)");
  app.add_flag("--mmap", options.paths.use_mmap,
               "read through a memory mapping (a file truncated while it is read "
               "ends the run with exit 2)")
      ->excludes(pread_flag);

  ptd::cli::AddSignatureFlags(app, &options.signature);
  if (const std::optional<int> rc = ptd::cli::ParseCommandLine(app, argc, argv)) return rc;
  if (const std::optional<std::string> bad = ptd::cli::CheckSignatureFlags(options.signature)) {
    std::cerr << "ptd-verify: " << *bad << "\n";
    return 2;
  }
  if (!manifest->empty()) options.paths.manifest = manifest->as<std::string>();
  if (!pte->empty()) options.paths.pte = pte->as<std::string>();
  if (!sm_opt->empty()) options.sm = sm;
  if (!limit_opt->empty()) (void)ptd::cli::ParseByteCount(digest_limit, &options.digest_limit);
  // Flags that change nothing are said, so a user does not trust them.
  if (!limit_opt->empty() && !options.digest && !options.stats) {
    std::cerr << "ptd-verify: note: --digest-limit has no effect without --digest or --stats\n";
  }
  if (!sm_opt->empty() && !options.paths.manifest && !options.paths.pte) {
    std::cerr << "ptd-verify: note: --sm has no effect without --manifest or --pte\n";
  }
  // The readable report prints kReportRows of each table: no more is built.
  if (!args->json_out && !args->all_rows) options.list_limit = ptd::cli::kReportRows;
  return std::nullopt;
}

// Runs the verification, with a progress bar for the digests on a terminal
// and, with --mmap, SIGBUS turned into exit code 2.
const ptd::VerifyOutcome& Verify(ptd::VerifyOptions& options) {
  if (options.paths.use_mmap) {
    std::string files = options.paths.ptd;
    if (options.paths.manifest) files += ", " + *options.paths.manifest;
    if (options.paths.pte) files += ", " + *options.paths.pte;
    ptd::cli::ExitOnMappedFileFault("ptd-verify", files);
  }
  // Digests are the slow part of a verification: a bar on a terminal.
  ptd::cli::ProgressBar bar;
  if (options.digest && ::isatty(STDERR_FILENO)) {
    bar.Start("digests", ptd::cli::ProgressBar::kItems);
    options.digest_progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
  }
  const ptd::VerifyOutcome& outcome = ptd::cli::KeepUntilExit(ptd::RunVerify(options));
  bar.Erase();
  return outcome;
}

int Main(int argc, char** argv) {
  Args args;
  if (const std::optional<int> rc = Parse(argc, argv, &args)) return *rc;
  const ptd::VerifyOutcome& outcome = Verify(args.options);
  if (!args.json_out) {
    return ptd::cli::PrintVerifyOutcome("ptd-verify", outcome, nullptr, args.all_rows);
  }
  const nlohmann::ordered_json& json = ptd::cli::KeepUntilExit(
      ptd::VerifyJson(outcome, ptd::JsonExtras{.names = ptd::cli::ToolInputNames()}));
  return ptd::cli::PrintVerifyOutcome("ptd-verify", outcome, &json, args.all_rows);
}

}  // namespace

int main(int argc, char** argv) {
  ptd::cli::UseHugePageMalloc();
  ptd::cli::FixMallocMmapThreshold();
  return ptd::cli::RunGuarded("ptd-verify", [&] { return Main(argc, argv); });
}
