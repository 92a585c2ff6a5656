// What ptd-extract and ptd-reweight share: how a failure is said (one line on
// stderr, or a JSON object on stdout with --json) and which exit code it
// gets (1 for a broken rule, 2 for anything else).
#ifndef PTD_VERIFIER_CHECKPOINT_CLI_H_
#define PTD_VERIFIER_CHECKPOINT_CLI_H_

#include <cctype>
#include <iostream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

#include "verifier/cli_util.h"

namespace ptd::cli {

// The rule ID a library message ends with ("... (S8)" -> "S8"), or "".
inline std::string RuleOfMessage(std::string_view message) {
  if (message.size() < 4 || message.back() != ')') return "";
  const size_t open = message.rfind('(');
  if (open == std::string_view::npos) return "";
  const std::string_view id = message.substr(open + 1, message.size() - open - 2);
  if (id.size() < 2 || id.size() > 3 || !std::isupper(static_cast<unsigned char>(id[0]))) {
    return "";
  }
  for (const char c : id.substr(1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return "";
  }
  return std::string(id);
}

// Says `status` and returns the exit code: 1 when it names a rule (other
// than I1, an unreadable input), else 2.
inline int ReportFailure(const char* program, const absl::Status& status, bool json_out) {
  const std::string message(status.message());
  const std::string rule = RuleOfMessage(message);
  const int code = !rule.empty() && rule != "I1" ? 1 : 2;
  if (json_out) {
    nlohmann::ordered_json error{{"rule", rule.empty() ? nullptr : nlohmann::ordered_json(rule)},
                                 {"message", message},
                                 {"code", absl::StatusCodeToString(status.code())}};
    nlohmann::ordered_json j{{"ok", false}, {"error", std::move(error)}};
    WriteOut(j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
  }
  std::cerr << program << ": " << message << "\n";
  return code;
}

}  // namespace ptd::cli

#endif  // PTD_VERIFIER_CHECKPOINT_CLI_H_
