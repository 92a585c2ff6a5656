// The JSON form of a verification (docs/SPEC.md section 6) as an
// nlohmann::ordered_json tree, rendered from a VerifyOutcome (ptd/verify.h).
// Private to this repository: the tools extend the tree (ptd-load adds its
// load results by index), the Python module converts it to dicts, and the
// tests read it. Library users get the same bytes as text from
// ptd::FormatJson (ptd/verify.h), so that no public header exposes nlohmann.
//
// Example:
//   const VerifyOutcome out = RunVerify(options);
//   std::cout << DumpJson(VerifyJson(out));  // == FormatJson(out)
//
// Thread-safety: pure functions of their arguments.
#ifndef PTD_RUNTIME_VERIFY_VERIFY_JSON_H_
#define PTD_RUNTIME_VERIFY_VERIFY_JSON_H_

#include <cstddef>
#include <functional>
#include <string>

#include "nlohmann/json.hpp"

#include "ptd/verify.h"

namespace ptd {

// Members a caller adds, by index, to each listed key and weight after the
// verifier's own (ptd-load's "loaded", "residency", "sha256").
struct JsonExtras {
  // `key` indexes VerifiedContainer::keys.
  std::function<void(size_t key, nlohmann::ordered_json& j)> key;
  // `manifest` indexes VerifyOutcome::manifests, `weight` its weights.
  std::function<void(size_t manifest, size_t weight, nlohmann::ordered_json& j)> weight;
  // How hints name where an input goes.
  InputNames names;
};

// The SPEC section 6 object: ok, ptd, manifests, errors, warnings and, for
// an unreadable input, error.
nlohmann::ordered_json VerifyJson(const VerifyOutcome& outcome, const JsonExtras& extras = {});

// One diagnostic as the JSON object of SPEC section 6.
nlohmann::ordered_json DiagnosticJson(const Diagnostic& d);

// Two-space indented, a newline at the end; bytes that are not UTF-8
// (keys and fqns come from the file) become U+FFFD.
std::string DumpJson(const nlohmann::ordered_json& j);

}  // namespace ptd

#endif  // PTD_RUNTIME_VERIFY_VERIFY_JSON_H_
