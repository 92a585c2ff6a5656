#include "tests/testing/diagnostics.h"

namespace ptd::testing {

std::vector<std::string> ErrorRules(const Report& r) {
  std::vector<std::string> rules;
  for (const Diagnostic& d : r.errors()) rules.push_back(d.rule);
  return rules;
}

std::string Describe(const Report& r) {
  std::string out;
  for (const Diagnostic& d : r.errors()) out += "error " + d.message + "\n";
  for (const Diagnostic& d : r.warnings()) out += "warning " + d.message + "\n";
  return out;
}

}  // namespace ptd::testing
