#include "ptd/rules.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

#include "runtime/internal/strings.h"

namespace ptd {
namespace {

using internal::Sv;

constexpr Severity E = Severity::kError;
constexpr Severity W = Severity::kWarning;

// docs/SPEC.md, section by section. Keep in step with it:
// tests/verifier/rule_files_test.cc compares the two.
constexpr RuleInfo kRules[] = {
    // 1. The .ptd container.
    {"H1", E, 1},
    {"H2", E, 1},
    {"H3", E, 1},
    {"H4", E, 1},
    {"H5", W, 1},
    {"C1", E, 1},
    {"C2", E, 1},
    {"C3", E, 1},
    {"C4", E, 1},
    {"C5", E, 1},
    {"C6", E, 1},
    {"C7", E, 1},
    {"C8", E, 1},
    // 2. The CUDA weight manifest (and its runtime-owned entries).
    {"M1", E, 2},
    {"M2", E, 2},
    {"M3", E, 2},
    {"M4", E, 2},
    {"M5", E, 2},
    {"M6", E, 2},
    {"U1", W, 2},
    {"R1", W, 2},
    {"W4", E, 2},
    // 3. View geometry, at write time and at load time.
    {"G1", E, 3},
    {"G2", E, 3},
    {"G3", E, 3},
    {"G4", E, 3},
    {"G5", W, 3},
    {"W1", E, 3},
    {"W2", E, 3},
    {"W3", E, 3},
    // 4. Finding the manifest in a .pte.
    {"P1", E, 4},
    {"P2", E, 4},
    {"P3", E, 4},
    {"P4", W, 4},
    // 5. Cross-checks between a manifest and a .ptd.
    {"X1", E, 5},
    {"X2", E, 5},
    {"X3", W, 5},
    // 6. The command line: digests, and failures that are no format rule.
    {"D1", W, 6},
    {"I1", E, 6},
    {"I2", E, 6},
    // 7. safetensors, and the health scan.
    {"S1", E, 7},
    {"S2", E, 7},
    {"S3", E, 7},
    {"S4", E, 7},
    {"S5", E, 7},
    {"S6", E, 7},
    {"S7", E, 7},
    {"S8", E, 7},
    {"S9", E, 7},
    {"S10", E, 7},
    {"S11", W, 7},
    {"S12", W, 7},
    {"N1", W, 7},
    // 8. Signed models.
    {"A1", E, 8},
    {"A2", E, 8},
    {"A3", E, 8},
    {"A4", E, 8},
    {"A5", E, 8},
    {"A6", E, 8},
    {"A7", E, 8},
};

// The payload's type URL: the rule's ID is the payload.
constexpr std::string_view kRulePayload = "type.ptd.dev/ptd.Rule";

}  // namespace

absl::Span<const RuleInfo> Rules() { return kRules; }

const RuleInfo* FindRule(std::string_view id) {
  const auto it = std::find_if(std::begin(kRules), std::end(kRules),
                               [&](const RuleInfo& r) { return r.id == id; });
  return it == std::end(kRules) ? nullptr : &*it;
}

bool IsWarningRule(std::string_view id) {
  const RuleInfo* r = FindRule(id);
  return r != nullptr && r->severity == Severity::kWarning;
}

absl::Status RuleError(absl::StatusCode code, std::string_view rule, std::string_view message) {
  return WithRule(absl::Status(code, absl::StrCat(Sv(message), " (", Sv(rule), ")")), rule);
}

absl::Status WithRule(absl::Status status, std::string_view rule) {
  if (!status.ok()) status.SetPayload(Sv(kRulePayload), absl::Cord(Sv(rule)));
  return status;
}

std::optional<std::string> RuleOf(const absl::Status& status) {
  const auto rule = status.GetPayload(Sv(kRulePayload));
  if (!rule) return std::nullopt;
  return std::string(*rule);
}

absl::Status PrefixStatus(std::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(Sv(prefix), status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace ptd
