#include "verifier/cli_util.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "ptd/manifest.h"
#include "runtime/verify/verify_json.h"

namespace ptd::cli {

void RememberUntilExit(const void* p) {
  // Never destroyed either: no exit-time destructor walks what it holds.
  static auto* const kept = new std::vector<const void*>();
  kept->push_back(p);
}

namespace {

int g_write_errno = 0;  // The first failed write to stdout.
bool g_write_failed = false;

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The nearest option name (e.g. "--manifest") within edit distance 2 of
// `arg`, or "" when none is that close.
std::string NearestOption(const CLI::App& app, const std::string& arg) {
  std::string best;
  size_t best_d = 3;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& name : o->get_lnames()) {
      const std::string flag = "--" + name;
      const size_t d = EditDistance(arg, flag);
      if (d < best_d) {
        best_d = d;
        best = flag;
      }
    }
  }
  return best;
}

std::string FailureMessage(const CLI::App* app, const CLI::Error& e) {
  std::string msg = absl::StrCat(e.what(), "\n");
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    for (const std::string& arg : app->remaining()) {
      if (arg.size() < 2 || arg[0] != '-') continue;
      const std::string near = NearestOption(*app, arg.substr(0, arg.find('=')));
      if (!near.empty())
        absl::StrAppend(&msg, "Unknown flag ", arg, ": did you mean ", near, "?\n");
    }
  }
  absl::StrAppend(&msg, "Run with --help for more information.\n");
  return msg;
}

}  // namespace

bool WriteOut(std::string_view text) {
  if (g_write_failed) return false;
  errno = 0;
  const size_t n = std::fwrite(text.data(), 1, text.size(), stdout);
  if (n != text.size() || std::fflush(stdout) != 0) {
    g_write_failed = true;
    g_write_errno = errno;
    return false;
  }
  return true;
}

int RunGuarded(const char* program, const std::function<int()>& body) {
  int rc = 0;
  try {
    rc = body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", program);
    return 2;
  } catch (const std::length_error&) {
    std::fprintf(stderr, "%s: out of memory (a size past what can be allocated)\n", program);
    return 2;
  }
  std::cout.flush();
  errno = 0;
  if (std::fflush(stdout) != 0 && !g_write_failed) {
    g_write_failed = true;
    g_write_errno = errno;
  }
  if (std::ferror(stdout) != 0) g_write_failed = true;
  if (g_write_failed) {
    std::fprintf(stderr, "%s: write error: %s\n", program,
                 g_write_errno != 0 ? std::strerror(g_write_errno) : "standard output");
    return 2;
  }
  return rc;
}

void SetUp(CLI::App& app, const std::string& version, bool malloc_lines) {
  app.failure_message(FailureMessage);
  app.get_formatter()->column_width(34);
  std::string line = absl::StrCat(app.get_name(), " ", version);
  if (!malloc_lines) {
    app.set_version_flag("--version", line);
    return;
  }
  app.set_version_flag("--version", std::function<std::string()>([line = std::move(line)] {
                         return absl::StrCat(line, "\n", MallocPagesLine(), "\n", MallocMmapLine());
                       }));
}

std::string ManifestFlagHelp() {
  return absl::StrCat("a standalone ", std::string(kManifestMagicFqn0), " or ",
                      std::string(kManifestMagicFqn3), " manifest");
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help, version or a usage error.
    std::ostringstream out, err;
    const int rc = app.exit(e, out, err);
    WriteOut(out.str());
    std::fputs(err.str().c_str(), stderr);
    return rc == 0 ? 0 : 2;
  }
  return std::nullopt;
}

bool ParseByteCount(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(text, out);  // False past 2^64 - 1.
}

bool ParseByteSize(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  int shift = 0;
  switch (text.back()) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    case 'T':
    case 't':
      shift = 40;
      break;
    default:
      break;
  }
  uint64_t n = 0;
  if (!ParseByteCount(shift == 0 ? text : text.substr(0, text.size() - 1), &n)) return false;
  if (n > (~uint64_t{0} >> shift)) return false;
  *out = n << shift;
  return true;
}

InputNames ToolInputNames() {
  return InputNames{.ptd = "as the FILE.ptd argument",
                    .manifest = "with --manifest",
                    .pte = "with --pte",
                    .all_rows = "--all lists them"};
}

namespace {

// The readable report's options: kReportRows rows of each table unless
// --all (`all_rows`).
TextOptions ReportTextOptions(bool all_rows) {
  return TextOptions{.max_rows = all_rows ? 0 : kReportRows, .names = ToolInputNames()};
}

}  // namespace

int PrintVerifyOutcome(const char* program, const VerifyOutcome& outcome,
                       const nlohmann::ordered_json* json, bool all_rows) {
  // An unreadable input is said once: on stderr, beside the JSON object
  // (which carries it too), or instead of the readable report.
  const InputError* io = outcome.io_error();
  if (json != nullptr) {
    WriteOut(DumpJson(*json));
    if (io != nullptr) std::cerr << program << ": " << io->status.message() << "\n";
  } else if (io != nullptr) {
    std::cerr << program << ": " << FormatText(outcome);
  } else {
    WriteOut(FormatText(outcome, ReportTextOptions(all_rows)));
  }
  return outcome.exit_code();
}

namespace {

char g_fault_message[1280];
size_t g_fault_message_len = 0;

void OnSigbus(int /*sig*/) {
  // Only async-signal-safe calls here.
  ssize_t ignored = ::write(STDERR_FILENO, g_fault_message, g_fault_message_len);
  (void)ignored;
  ::_exit(2);
}

}  // namespace

void ExitOnMappedFileFault(const char* program, const std::string& what) {
  const std::string msg = absl::StrCat(
      program,
      ": a mapped input file shrank while it was being read (SIGBUS): ", what.substr(0, 1024),
      "; the file changed during verification (run without --mmap "
      "to read it with pread)\n");
  g_fault_message_len = std::min(msg.size(), sizeof(g_fault_message));
  std::memcpy(g_fault_message, msg.data(), g_fault_message_len);
  struct sigaction sa {};
  sa.sa_handler = OnSigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

void AddSignatureFlags(CLI::App& app, SignatureOptions* options) {
  auto* sig = app.add_option("--signature", options->signature,
                             "a model_signing signature (Sigstore bundle, e.g. model.sig) of the "
                             "model's folder: check it and every file's digest (A1-A7)")
                  ->type_name("FILE");
  auto* key = app.add_option("--public-key", options->public_key,
                             "with --signature: the signer's EC public key (PEM)")
                  ->type_name("PEM");
  auto* chain = app.add_option("--certificate-chain", options->certificate_chain,
                               "with --signature: the certificates you trust (PEM); the "
                               "signing certificate must chain to them")
                    ->type_name("PEM");
  auto* dir = app.add_option("--model-dir", options->model_dir,
                             "with --signature: the signed folder (default: the .ptd's folder)")
                  ->type_name("DIR");
  key->excludes(chain);
  key->needs(sig);
  chain->needs(sig);
  dir->needs(sig);
}

std::optional<std::string> CheckSignatureFlags(const SignatureOptions& options) {
  if (options.enabled() && options.public_key.empty() && options.certificate_chain.empty()) {
    return "--signature needs --public-key or --certificate-chain (the trust material is never "
           "taken from the signature file)";
  }
  return std::nullopt;
}

}  // namespace ptd::cli
