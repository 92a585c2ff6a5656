#include "ptd/rules.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ptd {
namespace {

bool IsRuleId(std::string_view id) {
  if (id.size() < 2 || id.size() > 3 || id[0] < 'A' || id[0] > 'Z') return false;
  for (const char c : id.substr(1)) {
    if (c < '0' || c > '9') return false;
  }
  return id[1] != '0';
}

TEST(RulesTest, TheTableHoldsEachRuleOnceInTheGrammar) {
  std::set<std::string_view> seen;
  for (const RuleInfo& r : Rules()) {
    EXPECT_TRUE(IsRuleId(r.id)) << r.id;
    EXPECT_TRUE(seen.insert(r.id).second) << r.id << " twice";
    EXPECT_GE(r.section, 1) << r.id;
    EXPECT_LE(r.section, 8) << r.id;
    EXPECT_EQ(FindRule(r.id), &r);
  }
  EXPECT_EQ(FindRule("Z9"), nullptr);
  EXPECT_EQ(FindRule("G"), nullptr);
  EXPECT_EQ(FindRule(""), nullptr);
}

TEST(RulesTest, WarningsAreToldApartByTheTable) {
  for (const char* w : {"H5", "G5", "X3", "P4", "D1", "R1", "U1", "N1", "S11", "S12"}) {
    EXPECT_TRUE(IsWarningRule(w)) << w;
  }
  for (const char* e : {"H1", "G2", "S10", "A5", "I1", "I2", "W4"}) {
    EXPECT_FALSE(IsWarningRule(e)) << e;
  }
  EXPECT_FALSE(IsWarningRule("Z9"));
}

TEST(RulesTest, RuleErrorNamesTheRuleInTextAndPayload) {
  const absl::Status s = RuleError(absl::StatusCode::kDataLoss, "G2", "view requires 80 bytes");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "view requires 80 bytes (G2)");
  EXPECT_EQ(RuleOf(s), "G2");
}

TEST(RulesTest, NothingIsReadFromTheMessageText) {
  // A message that merely ends like a rule names none: only the payload does.
  EXPECT_EQ(RuleOf(absl::DataLossError("view requires 80 bytes (G2)")), std::nullopt);
  EXPECT_EQ(RuleOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(RuleOf(absl::NotFoundError("a.ptd: No such file")), std::nullopt);
}

TEST(RulesTest, PrefixKeepsTheCodeAndTheRule) {
  const absl::Status inner = RuleError(absl::StatusCode::kInvalidArgument, "S8", "shape differs");
  const absl::Status outer = PrefixStatus("a.ptd: ", inner);
  EXPECT_EQ(outer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outer.message(), "a.ptd: shape differs (S8)");
  EXPECT_EQ(RuleOf(outer), "S8");
  EXPECT_TRUE(PrefixStatus("x: ", absl::OkStatus()).ok());
  EXPECT_EQ(RuleOf(PrefixStatus("x: ", absl::UnavailableError("eio"))), std::nullopt);
}

TEST(RulesTest, WithRuleAttachesWithoutTouchingTheMessage) {
  const absl::Status s = WithRule(absl::DataLossError("bytes differ (S9)"), "S9");
  EXPECT_EQ(s.message(), "bytes differ (S9)");
  EXPECT_EQ(RuleOf(s), "S9");
  EXPECT_TRUE(WithRule(absl::OkStatus(), "S9").ok());
  EXPECT_EQ(RuleOf(WithRule(absl::OkStatus(), "S9")), std::nullopt);
}

}  // namespace
}  // namespace ptd
