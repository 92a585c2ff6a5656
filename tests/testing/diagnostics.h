// gMock matchers over Reports and Diagnostics, so a test names the rule (and
// what else it expects of the diagnostic) instead of looping over errors():
//
//   EXPECT_THAT(report, HasError("G2"));
//   EXPECT_THAT(report, HasDiagnostic("M1", absl::StatusCode::kUnimplemented));
//   EXPECT_THAT(report, HasError("G4", AllOf(MessageHas("128"),
//                                            SourceIs("pte:forward:1"))));
#ifndef PTD_TESTS_TESTING_DIAGNOSTICS_H_
#define PTD_TESTS_TESTING_DIAGNOSTICS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"

#include "ptd/report.h"

namespace ptd::testing {

// Diagnostic field matchers.
inline auto RuleIs(const std::string& rule) {
  return ::testing::Field("rule", &Diagnostic::rule, rule);
}
inline auto CodeIs(absl::StatusCode code) {
  return ::testing::Field("code", &Diagnostic::code, code);
}
inline auto MessageHas(const std::string& part) {
  return ::testing::Field("message", &Diagnostic::message, ::testing::HasSubstr(part));
}
inline auto FileIs(const std::string& file) {
  return ::testing::Field("file", &Diagnostic::file, file);
}
inline auto SourceIs(const std::string& source) {
  return ::testing::Field("source", &Diagnostic::source, ::testing::Optional(source));
}

// A Report with an error of `rule` that also matches `m`.
template <typename M>
auto HasError(const std::string& rule, M m) {
  return ::testing::Property("errors", &Report::errors,
                             ::testing::Contains(::testing::AllOf(RuleIs(rule), m)));
}
inline auto HasError(const std::string& rule) {
  return ::testing::Property("errors", &Report::errors, ::testing::Contains(RuleIs(rule)));
}
// A Report with an error of `rule` and status code `code`.
inline auto HasDiagnostic(const std::string& rule, absl::StatusCode code) {
  return HasError(rule, CodeIs(code));
}
template <typename M>
auto HasWarning(const std::string& rule, M m) {
  return ::testing::Property("warnings", &Report::warnings,
                             ::testing::Contains(::testing::AllOf(RuleIs(rule), m)));
}
inline auto HasWarning(const std::string& rule) {
  return ::testing::Property("warnings", &Report::warnings, ::testing::Contains(RuleIs(rule)));
}

// The rules of the report's errors, in order (repeats kept).
std::vector<std::string> ErrorRules(const Report& r);
// Every error and warning, one per line, for failure messages.
std::string Describe(const Report& r);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_DIAGNOSTICS_H_
