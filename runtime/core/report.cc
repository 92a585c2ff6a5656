#include "ptd/report.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ptd {
namespace {

Diagnostic Make(Severity severity, std::string rule, absl::StatusCode code, std::string message,
                Where where) {
  Diagnostic d;
  d.severity = severity;
  d.code = code;
  d.message = absl::StrCat(message, " (", rule, ")");
  d.rule = std::move(rule);
  d.file = std::move(where.file);
  d.key = std::move(where.key);
  d.fqn = std::move(where.fqn);
  d.segment = where.segment;
  d.source = std::move(where.source);
  return d;
}

bool AnyRule(const std::vector<Diagnostic>& ds, std::string_view rule) {
  return std::any_of(ds.begin(), ds.end(), [&](const Diagnostic& d) { return d.rule == rule; });
}

}  // namespace

const Diagnostic& Report::Error(std::string rule, absl::StatusCode code, std::string message,
                                Where where) {
  errors_.push_back(
      Make(Severity::kError, std::move(rule), code, std::move(message), std::move(where)));
  return errors_.back();
}

const Diagnostic& Report::Warning(std::string rule, std::string message, Where where) {
  warnings_.push_back(Make(Severity::kWarning, std::move(rule), absl::StatusCode::kOk,
                           std::move(message), std::move(where)));
  return warnings_.back();
}

bool Report::HasError(std::string_view rule) const { return AnyRule(errors_, rule); }

bool Report::HasWarning(std::string_view rule) const { return AnyRule(warnings_, rule); }

absl::Status Report::FirstError() const {
  if (errors_.empty()) return absl::OkStatus();
  return ToStatus(errors_.front());
}

void Report::Merge(const Report& other) {
  errors_.insert(errors_.end(), other.errors_.begin(), other.errors_.end());
  warnings_.insert(warnings_.end(), other.warnings_.begin(), other.warnings_.end());
}

void Report::Merge(Report&& other) {
  errors_.insert(errors_.end(), std::make_move_iterator(other.errors_.begin()),
                 std::make_move_iterator(other.errors_.end()));
  warnings_.insert(warnings_.end(), std::make_move_iterator(other.warnings_.begin()),
                   std::make_move_iterator(other.warnings_.end()));
  other.errors_.clear();
  other.warnings_.clear();
}

absl::Status ToStatus(const Diagnostic& d) {
  if (d.file.empty()) return WithRule(absl::Status(d.code, d.message), d.rule);
  return WithRule(absl::Status(d.code, absl::StrCat(d.file, ": ", d.message)), d.rule);
}

}  // namespace ptd
