// ptd-verify: checks an ExecuTorch CUDA-backend .ptd (and optionally its
// manifest or .pte) against every rule of docs/SPEC.md and says exactly which
// rule is broken and where.
//
// Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or unreadable
// input.
#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "ptd/verify.h"

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  ptd::VerifyOptions options;
  bool json_out = false;
  bool use_pread = false;
  bool use_mmap = false;
  uint32_t sm = 0;

  CLI::App app(
      "Verifies an ExecuTorch .ptd weight file: the container (H*, C*), and "
      "with --manifest or --pte the CUDA weight manifests and every view's "
      "geometry (M*, G*, X*, P*).\n"
      "Exit codes: 0 no errors, 1 a rule is broken, 2 usage error or "
      "unreadable input.",
      "ptd-verify");
  app.set_version_flag("--version", std::string("ptd-verify ") + PTD_VERSION);
  app.add_option("ptd", options.ptd_path, "the .ptd file")->required();
  auto* manifest = app.add_option("--manifest", "a standalone ETCUDAFQN0 or ETCUDAFQN3 manifest");
  auto* pte = app.add_option("--pte", "a .pte whose CUDA delegates carry manifests");
  auto* sm_opt = app.add_option("--sm", sm,
                                "compute capability (e.g. 90): report which "
                                "variant each manifest would run");
  app.add_flag("--json", json_out, "print one JSON object on stdout");
  app.add_flag("--digest", options.digest,
               "add sha256 of each key's bytes and each view's elements");
  app.add_option("--digest-limit", options.digest_limit,
                 "skip digests of views that gather more bytes than this "
                 "(warning D1)")
      ->capture_default_str();
  auto* pread_flag = app.add_flag(
      "--pread", use_pread, "read with pread(2) (the default; a file that shrinks is exit 2)");
  app.add_flag("--mmap", use_mmap,
               "read through a memory mapping (a file truncated while it is read "
               "ends the run with exit 2)")
      ->excludes(pread_flag);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // Prints help/version or the usage error.
    return rc == 0 ? 0 : 2;
  }
  if (!manifest->empty()) options.manifest_path = manifest->as<std::string>();
  if (!pte->empty()) options.pte_path = pte->as<std::string>();
  if (!sm_opt->empty()) options.sm = sm;
  options.use_mmap = use_mmap;
  if (use_mmap) {
    std::string files = options.ptd_path;
    if (options.manifest_path) files += ", " + *options.manifest_path;
    if (options.pte_path) files += ", " + *options.pte_path;
    ptd::ExitOnMappedFileFault(files);
  }

  const ptd::VerifyOutcome outcome = ptd::RunVerify(options);
  // An unreadable input is said once: on stderr, beside the JSON object (which
  // carries it too), or as the whole readable report.
  if (json_out) {
    // Keys and fqns come from the file and need not be UTF-8: invalid bytes
    // become U+FFFD in JSON (the readable report does the same).
    std::cout << outcome.json.dump(2, ' ', false,
                                   nlohmann::ordered_json::error_handler_t::replace)
              << "\n";
    if (outcome.io_error) std::cerr << "ptd-verify: " << *outcome.io_error << "\n";
  } else if (outcome.io_error) {
    std::cerr << ptd::FormatText(outcome);
  } else {
    std::cout << ptd::FormatText(outcome);
  }
  return outcome.exit_code();
}
