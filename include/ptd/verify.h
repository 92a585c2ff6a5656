// The verification session behind ptd-verify: runs every check the library
// has over a .ptd and, optionally, a standalone manifest and/or a .pte, and
// builds the report of docs/SPEC.md section 6 (JSON and readable text).
#ifndef PTD_VERIFY_H_
#define PTD_VERIFY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "ptd/report.h"
#include "ptd/weight_bundle.h"

namespace ptd {

inline constexpr uint64_t kDefaultDigestLimit = uint64_t{1} << 30;

struct VerifyOptions {
  std::string ptd_path;
  std::optional<std::string> manifest_path;
  std::optional<std::string> pte_path;
  std::optional<uint32_t> sm;
  bool digest = false;
  uint64_t digest_limit = kDefaultDigestLimit;
  // The health scan (docs/SPEC.md section 7, N1): each weight of a floating
  // dtype gets "stats" (NaN and Inf counts, finite min and max), computed
  // in the same pass over its elements as its digest, and a weight holding
  // NaN or Inf draws warning N1. Views past digest_limit are skipped (D1).
  bool stats = false;
  // true: read through a memory mapping (the same results, fewer copies).
  // A mapped file that another process truncates while it is read raises
  // SIGBUS, which no Status can report; so the default is pread(2), where a
  // file that shrinks is a read error (exit code 2) naming the file. With
  // use_mmap, a CLI calls ExitOnMappedFileFault() first.
  bool use_mmap = false;
  // With digest: called after each key's and each weight's digest with the
  // number done and the total (keys plus weights), for a progress bar.
  std::function<void(uint64_t done, uint64_t total)> digest_progress;
  // 0: the report lists every key and every weight. N > 0: it lists the
  // first N of the container's segments and keys and of each manifest's
  // weights, and gives the totals as "segment_count" and "named_data_count"
  // (in "ptd") and "weight_count" (in each manifest) where a list is cut
  // short. Each listed key then carries its segment's "file_offset", and
  // each listed weight the "segment_size" behind its key. For a readable
  // report that prints N rows: the rest is never built. Verification, its
  // errors and warnings, and any digests are the same either way.
  size_t list_limit = 0;
};

struct VerifyOutcome {
  nlohmann::ordered_json json;  // The SPEC section 6 object.
  Report report;
  // Set when an input file could not be opened or read (exit code 2).
  std::optional<std::string> io_error;
  // The bundle that was verified (null when the inputs could not be
  // opened): a caller that goes on to load uses it (LoadWeights(*bundle,
  // ...)) instead of opening and verifying the files again.
  std::shared_ptr<const WeightBundle> bundle;

  // 0: no errors; 1: some rule broken; 2: an input could not be read.
  int exit_code() const {
    if (io_error) return 2;
    return report.ok() ? 0 : 1;
  }
};

VerifyOutcome RunVerify(const VerifyOptions& options);

// The same over inputs already opened (options' paths are only reported;
// use_mmap is ignored). For tests that wrap a source (fault injection) and
// for callers with their own FileSource.
VerifyOutcome RunVerify(const VerifyOptions& options, const BundleSources& sources);

// Makes SIGBUS (a mapped file that shrank under a read) end the process
// with exit code 2 and one line on stderr naming `what` (the files read),
// instead of a crash. Process-wide; for command-line tools that read through
// a mapping (ptd-verify --mmap). The handler only writes and exits
// (async-signal-safe); `what` is copied (up to 1 KiB).
void ExitOnMappedFileFault(const std::string& what);

// The rule ID of an input that cannot be opened or read (docs/SPEC.md
// section 6): its JSON error carries rule "I1", the Status code and the file.
inline constexpr const char* kInputRule = "I1";

struct TextOptions {
  // Rows of the key table and of each weight table; past it, one summary
  // row ("... and N more keys; --all lists them") and the verdict repeated
  // last. 0: every row.
  size_t max_rows = 0;
};

// The readable report: verdict, errors first, then warnings, the container,
// and a table of weights per manifest. For an unreadable input, one line:
// "cannot read input: <message> (I1)" (a CLI prefixes its name).
std::string FormatText(const VerifyOutcome& outcome, const TextOptions& text = {});

// One diagnostic as the JSON object of SPEC section 6.
nlohmann::ordered_json DiagnosticJson(const Diagnostic& d);

}  // namespace ptd

#endif  // PTD_VERIFY_H_
