// The rules of docs/SPEC.md as data, and the one way an error names one.
//
// Every rule ID the project reports is a row of one table (Rules()): its
// severity and the SPEC section that defines it. A check that fails makes
// its Status with RuleError, which appends " (RULE)" to the message for
// people and attaches the rule as a payload for programs; RuleOf reads it
// back. Nothing parses a rule out of message text.
//
// Adding a rule: a row in runtime/core/rules.cc, the check that reports it,
// and its regression case in tests/testing/rule_files.cc
// (tests/verifier/rule_files_test.cc checks the table against
// docs/SPEC.md).
//
// Example:
//   if (need > have) {
//     return ptd::RuleError(absl::StatusCode::kDataLoss, "G2",
//                           absl::StrCat("view requires ", need, " bytes"));
//   }
//   ...
//   if (std::optional<std::string> rule = ptd::RuleOf(status)) ...  // "G2"
//
// Thread-safety: the table is immutable; every function may be called from
// any thread.
#ifndef PTD_RULES_H_
#define PTD_RULES_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ptd {

enum class Severity { kError, kWarning };

struct RuleInfo {
  std::string_view id;  // "G2": one capital letter and one or two digits.
  Severity severity;
  int section;  // The docs/SPEC.md section that defines it ("## 3.").
};

// Every rule, in SPEC order.
absl::Span<const RuleInfo> Rules();

// The row of `id`; nullptr for an ID the SPEC does not define.
const RuleInfo* FindRule(std::string_view id);

// True for a rule whose findings are warnings (H5, G5, X3, ...).
bool IsWarningRule(std::string_view id);

// An error that breaks `rule`: `code`, the message "MESSAGE (RULE)", and the
// rule attached as a payload (RuleOf). `rule` should be a row of Rules().
absl::Status RuleError(absl::StatusCode code, std::string_view rule, std::string_view message);

// `status` with `rule` attached as RuleError attaches it, its message (which
// already names the rule) untouched. OK stays OK.
absl::Status WithRule(absl::Status status, std::string_view rule);

// The rule a Status breaks (RuleError, Report::FirstError, ToStatus);
// nullopt for OK and for a Status that names none (an I/O error, a bad
// argument).
std::optional<std::string> RuleOf(const absl::Status& status);

// `status` with `prefix` before its message; its code and payloads (its
// rule) kept. OK stays OK.
absl::Status PrefixStatus(std::string_view prefix, const absl::Status& status);

}  // namespace ptd

#endif  // PTD_RULES_H_
