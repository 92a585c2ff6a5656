// The verification session behind ptd-verify: runs every check the library
// has over a .ptd and, optionally, a standalone manifest and/or a .pte, and
// builds the report of docs/SPEC.md section 6 (JSON and readable text).
#ifndef PTD_VERIFY_H_
#define PTD_VERIFY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "ptd/report.h"

namespace ptd {

inline constexpr uint64_t kDefaultDigestLimit = uint64_t{1} << 30;

struct VerifyOptions {
  std::string ptd_path;
  std::optional<std::string> manifest_path;
  std::optional<std::string> pte_path;
  std::optional<uint32_t> sm;
  bool digest = false;
  uint64_t digest_limit = kDefaultDigestLimit;
  bool use_mmap = true;  // false: read through pread (same results).
};

struct VerifyOutcome {
  nlohmann::ordered_json json;  // The SPEC section 6 object.
  Report report;
  // Set when an input file could not be opened or read (exit code 2).
  std::optional<std::string> io_error;

  // 0: no errors; 1: some rule broken; 2: an input could not be read.
  int exit_code() const {
    if (io_error) return 2;
    return report.ok() ? 0 : 1;
  }
};

VerifyOutcome RunVerify(const VerifyOptions& options);

// The readable report: verdict, errors first, then warnings, the container,
// and a table of weights per manifest.
std::string FormatText(const VerifyOutcome& outcome);

// One diagnostic as the JSON object of SPEC section 6.
nlohmann::ordered_json DiagnosticJson(const Diagnostic& d);

}  // namespace ptd

#endif  // PTD_VERIFY_H_
