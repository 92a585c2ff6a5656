// ptd-verify: checks an ExecuTorch CUDA-backend .ptd (and optionally its
// manifest or .pte) against every rule of docs/SPEC.md and says exactly which
// rule is broken and where.
//
// Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or unreadable
// input (including a stdout that cannot be written, and out of memory).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "ptd/verify.h"
#include "verifier/cli_util.h"

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

namespace {

int Main(int argc, char** argv) {
  ptd::VerifyOptions options;
  bool json_out = false;
  bool use_pread = false;
  bool use_mmap = false;
  bool all_rows = false;
  uint32_t sm = 0;
  std::string digest_limit;

  CLI::App app(
      "Verifies an ExecuTorch .ptd weight file: the container (H*, C*), and "
      "with --manifest and/or --pte the CUDA weight manifests and every view's "
      "geometry (M*, G*, X*, P*).\n"
      "Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or "
      "unreadable input.",
      "ptd-verify");
  ptd::cli::SetUp(app);
  app.set_version_flag("--version", std::function<std::string()>([] {
    return std::string("ptd-verify ") + PTD_VERSION + "\n" + ptd::cli::MallocPagesLine() +
           "\n" + ptd::cli::MallocMmapLine();
  }));
  app.add_option("ptd", options.ptd_path, "the .ptd file")->required()->type_name("FILE.ptd");
  auto* manifest = app.add_option("--manifest", "a standalone ETCUDAFQN0 or ETCUDAFQN3 manifest")
                       ->type_name("FILE");
  auto* pte =
      app.add_option("--pte", "a .pte whose CUDA delegates carry manifests")->type_name("FILE");
  auto* sm_opt = app.add_option("--sm", sm,
                                "compute capability (e.g. 90): report which "
                                "variant each manifest would run (needs --manifest or --pte)")
                     ->type_name("N");
  app.add_flag("--json", json_out, "print one JSON object on stdout (always complete)");
  app.add_flag("--all", all_rows, "list every key and weight (default: the first 50 of each)");
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
  app.add_flag("--mmap", use_mmap,
               "read through a memory mapping (a file truncated while it is read "
               "ends the run with exit 2)")
      ->excludes(pread_flag);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ptd::cli::ExitOnParseError(app, e);
  }
  if (!manifest->empty()) options.manifest_path = manifest->as<std::string>();
  if (!pte->empty()) options.pte_path = pte->as<std::string>();
  if (!sm_opt->empty()) options.sm = sm;
  if (!limit_opt->empty()) (void)ptd::cli::ParseByteCount(digest_limit, &options.digest_limit);
  // Flags that change nothing are said, so a user does not trust them.
  if (!limit_opt->empty() && !options.digest && !options.stats) {
    std::cerr << "ptd-verify: note: --digest-limit has no effect without --digest or --stats\n";
  }
  if (!sm_opt->empty() && !options.manifest_path && !options.pte_path) {
    std::cerr << "ptd-verify: note: --sm has no effect without --manifest or --pte\n";
  }
  options.use_mmap = use_mmap;
  if (use_mmap) {
    std::string files = options.ptd_path;
    if (options.manifest_path) files += ", " + *options.manifest_path;
    if (options.pte_path) files += ", " + *options.pte_path;
    ptd::ExitOnMappedFileFault(files);
  }

  // Digests are the slow part of a verification: a bar on a terminal.
  ptd::cli::ProgressBar bar;
  if (options.digest && ::isatty(STDERR_FILENO)) {
    bar.Start("digests", ptd::cli::ProgressBar::kItems);
    options.digest_progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
  }
  // The readable report prints kReportRows of each table: no more is built.
  if (!json_out && !all_rows) options.list_limit = ptd::cli::kReportRows;
  const ptd::VerifyOutcome& outcome = ptd::cli::KeepUntilExit(ptd::RunVerify(options));
  bar.Erase();
  // An unreadable input is said once: on stderr, beside the JSON object (which
  // carries it too), or instead of the readable report.
  if (json_out) {
    // Keys and fqns come from the file and need not be UTF-8: invalid bytes
    // become U+FFFD in JSON (the readable report does the same).
    ptd::cli::WriteOut(outcome.json.dump(2, ' ', false,
                                         nlohmann::ordered_json::error_handler_t::replace) +
                       "\n");
    if (outcome.io_error) std::cerr << "ptd-verify: " << *outcome.io_error << "\n";
  } else if (outcome.io_error) {
    std::cerr << "ptd-verify: " << ptd::FormatText(outcome);
  } else {
    ptd::cli::WriteOut(
        ptd::FormatText(outcome, ptd::TextOptions{
                                 .max_rows = all_rows ? 0 : ptd::cli::kReportRows}));
  }
  return outcome.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  ptd::cli::ReexecWithHugePageMalloc(argv);
  ptd::cli::FixMallocMmapThreshold();
  return ptd::cli::RunGuarded("ptd-verify", [&] { return Main(argc, argv); });
}
