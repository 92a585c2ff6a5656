// Report: the errors and warnings of one verification run.
//
// Checks append Diagnostics to a Report and keep going where the structure
// they need is sound (SPEC section 6, "Diagnostics"). The "open for use" entry
// points run the same checks and turn the first error into an absl::Status,
// so both tiers enforce exactly the same rules.
//
// Thread-safety: not thread-safe; one Report per run.
#ifndef PTD_REPORT_H_
#define PTD_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

#include "ptd/rules.h"

namespace ptd {

struct Diagnostic {
  Severity severity = Severity::kError;
  std::string rule;  // Stable rule ID from SPEC: "H4", "C5", "G2", ...
  absl::StatusCode code = absl::StatusCode::kDataLoss;
  std::string message;                // Names the place, both numbers, and ends "(RULE)".
  std::string file;                   // Path of the file the diagnostic is about.
  std::optional<std::string> key;     // Named-data / storage key.
  std::optional<std::string> fqn;     // Weight fqn.
  std::optional<uint64_t> segment;    // Segment index.
  std::optional<std::string> source;  // Manifest source ("manifest", "pte:m:0").
};

// Where a diagnostic applies; filled in by the caller that knows the place.
struct Where {
  std::string file;
  std::optional<std::string> key;
  std::optional<std::string> fqn;
  std::optional<uint64_t> segment;
  std::optional<std::string> source;
};

class Report {
 public:
  // Records an error. `message` should not carry the rule; it is appended as
  // " (RULE)". Returns the stored diagnostic.
  const Diagnostic& Error(std::string rule, absl::StatusCode code, std::string message,
                          Where where);
  const Diagnostic& Warning(std::string rule, std::string message, Where where);

  bool ok() const { return errors_.empty(); }
  const std::vector<Diagnostic>& errors() const { return errors_; }
  const std::vector<Diagnostic>& warnings() const { return warnings_; }

  // True when some error or warning carries `rule`.
  bool HasError(std::string_view rule) const;
  bool HasWarning(std::string_view rule) const;

  // OK when there are no errors; else the first error as a Status with its
  // code and a message "FILE: MESSAGE".
  absl::Status FirstError() const;

  // Appends every diagnostic of `other`.
  void Merge(const Report& other);
  void Merge(Report&& other);  // Moves other's diagnostics.

 private:
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
};

// Formats a diagnostic as a Status: code, "FILE: MESSAGE", and its rule as
// the payload RuleOf reads (ptd/rules.h).
absl::Status ToStatus(const Diagnostic& d);

}  // namespace ptd

#endif  // PTD_REPORT_H_
