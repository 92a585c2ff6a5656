// SignatureReport as JSON: the top-level "signature" object of ptd-verify's
// and ptd-load's --json, and Python's (one renderer for all). Header-only:
// the signing library itself has no JSON in its interface.
#ifndef PTD_RUNTIME_SIGNING_SIGNATURE_REPORT_JSON_H_
#define PTD_RUNTIME_SIGNING_SIGNATURE_REPORT_JSON_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

#include "ptd/model_signature.h"
#include "ptd/report.h"
#include "ptd/rules.h"

namespace ptd::internal {

// {"checked", "verified", "signature", "model_dir", "method",
//  "serialization", "hash", "shard_size", "one_pass", "one_pass_note",
//  "files": [{"name", "bytes", "read": "load" | "apart", "ok", "error"}],
//  "error", "rule"}.
inline nlohmann::ordered_json SignatureReportJson(const SignatureReport& r) {
  using J = nlohmann::ordered_json;
  J files = J::array();
  for (const SignatureReport::File& f : r.files) {
    files.push_back(J{{"name", f.name},
                      {"bytes", f.bytes},
                      {"read", f.read},
                      {"ok", f.ok},
                      {"error", f.error.empty() ? J(nullptr) : J(f.error)}});
  }
  const auto opt = [](const std::string& s) { return s.empty() ? J(nullptr) : J(s); };
  return J{{"checked", r.checked},
           {"verified", r.verified},
           {"signature", r.signature},
           {"model_dir", r.model_dir},
           {"method", opt(r.method)},
           {"serialization", opt(r.serialization)},
           {"hash", opt(r.hash)},
           {"shard_size", r.shard_size == 0 ? J(nullptr) : J(r.shard_size)},
           {"one_pass", r.one_pass},
           {"one_pass_note", opt(r.one_pass_note)},
           {"files", std::move(files)},
           {"error", r.error ? J(*r.error) : J(nullptr)},
           {"rule", r.rule ? J(*r.rule) : J(nullptr)}};
}

// The text reports' one line: "signature: verified (key, shards of 16777216
// bytes, blake2b; 3 files, the .ptd hashed on the load's reads)" or
// "signature: REFUSED: MESSAGE".
inline std::string SignatureReportLine(const SignatureReport& r) {
  if (!r.verified) {
    return "signature: REFUSED: " + (r.error ? *r.error : std::string("not verified"));
  }
  std::string s = "signature: verified (" + r.method + ", " + r.serialization;
  if (r.shard_size != 0) s += " of " + std::to_string(r.shard_size) + " bytes";
  s += ", " + r.hash + "; " + std::to_string(r.files.size()) +
       (r.files.size() == 1 ? " file" : " files");
  bool any_load = false;
  for (const auto& f : r.files) any_load |= f.read == "load";
  if (any_load)
    s += r.one_pass ? ", the .ptd hashed on the load's reads" : ", the .ptd hashed after the load";
  return s + ")";
}

// A signed load's failure that broke an A-rule, as the error its report
// lists (the rule, the message, the code, the signature file); nullopt
// for any other failure, and for a load that was not signed.
inline std::optional<Diagnostic> SignatureFailure(const absl::Status& s,
                                                  const SignatureOptions& options) {
  std::optional<std::string> rule = RuleOf(s);
  if (!options.enabled() || !rule || rule->front() != 'A') return std::nullopt;
  Diagnostic d;
  d.rule = *std::move(rule);
  d.code = s.code();
  d.message = std::string(s.message());
  d.file = options.signature;
  return d;
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_SIGNING_SIGNATURE_REPORT_JSON_H_
