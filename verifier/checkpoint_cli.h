// What ptd-extract and ptd-reweight share: how a failure is said (one line on
// stderr, or a JSON object on stdout with --json) and which exit code it
// gets (1 for a broken rule, 2 for anything else).
#ifndef PTD_VERIFIER_CHECKPOINT_CLI_H_
#define PTD_VERIFIER_CHECKPOINT_CLI_H_

#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

#include "ptd/report.h"
#include "ptd/rules.h"
#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"
#include "verifier/cli_util.h"

namespace ptd::cli {

// Says `status` and returns the exit code: 1 when it names a rule (other
// than kInputRule, an unreadable input), else 2.
inline int ReportFailure(const char* program, const absl::Status& status, bool json_out) {
  const std::string message(status.message());
  const std::optional<std::string> rule = RuleOf(status);
  const int code = rule && *rule != kInputRule ? 1 : 2;
  if (json_out) {
    // The shape every tool's failure has: {"ok", "errors", "warnings"}, one
    // error here (its rule null when it names none).
    nlohmann::ordered_json error{
        {"rule", rule ? nlohmann::ordered_json(std::string(*rule)) : nullptr},
        {"message", message},
        {"code", absl::StatusCodeToString(status.code())}};
    nlohmann::ordered_json j{{"ok", false},
                             {"errors", nlohmann::ordered_json::array({std::move(error)})},
                             {"warnings", nlohmann::ordered_json::array()}};
    WriteOut(DumpJson(j));
  }
  std::cerr << program << ": " << message << "\n";
  return code;
}

}  // namespace ptd::cli

#endif  // PTD_VERIFIER_CHECKPOINT_CLI_H_
