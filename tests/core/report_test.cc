// Report: diagnostics as data (rule, code, place), the "(RULE)" suffix, the
// first error as a Status, and the rule read back from a message.
#include "ptd/report.h"

#include <optional>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/diagnostics.h"

namespace ptd {
namespace {

using ::ptd::testing::CodeIs;
using ::ptd::testing::FileIs;
using ::ptd::testing::HasDiagnostic;
using ::ptd::testing::HasError;
using ::ptd::testing::HasWarning;
using ::ptd::testing::MessageHas;
using ::ptd::testing::SourceIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Not;

TEST(ReportTest, EmptyReportIsOk) {
  Report r;
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.FirstError().ok());
  EXPECT_FALSE(r.HasError("H1"));
}

TEST(ReportTest, ErrorCarriesRulePlaceAndSuffix) {
  Report r;
  const Diagnostic& d =
      r.Error("G2", absl::StatusCode::kDataLoss, "view too big",
              Where{.file = "m.ptd", .key = "k", .fqn = "w", .segment = 3, .source = "manifest"});
  EXPECT_EQ(d.severity, Severity::kError);
  EXPECT_EQ(d.message, "view too big (G2)");
  EXPECT_EQ(d.key, "k");
  EXPECT_EQ(d.fqn, "w");
  EXPECT_EQ(d.segment, 3u);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(
      r, HasError("G2", AllOf(FileIs("m.ptd"), SourceIs("manifest"), MessageHas("view too big"))));
  EXPECT_THAT(r, HasDiagnostic("G2", absl::StatusCode::kDataLoss));
  EXPECT_THAT(r, Not(HasDiagnostic("G2", absl::StatusCode::kUnimplemented)));
  EXPECT_THAT(r, Not(HasError("G3")));
}

TEST(ReportTest, WarningsDoNotFailTheReport) {
  Report r;
  const Diagnostic& d = r.Warning("G5", "bytes unused", Where{.file = "m.ptd"});
  EXPECT_EQ(d.severity, Severity::kWarning);
  EXPECT_EQ(d.code, absl::StatusCode::kOk);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.HasWarning("G5"));
  EXPECT_FALSE(r.HasError("G5"));
  EXPECT_THAT(r, HasWarning("G5", MessageHas("bytes unused (G5)")));
}

TEST(ReportTest, FirstErrorIsTheEarliestWithItsCodeAndFile) {
  Report r;
  r.Warning("H5", "trailing", Where{.file = "a.ptd"});
  r.Error("C2", absl::StatusCode::kUnimplemented, "version 1", Where{.file = "a.ptd"});
  r.Error("C4", absl::StatusCode::kDataLoss, "segment out", Where{.file = "a.ptd"});
  const absl::Status s = r.FirstError();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "a.ptd: version 1 (C2)");
  EXPECT_EQ(ToStatus(r.errors()[1]),
            WithRule(absl::DataLossError("a.ptd: segment out (C4)"), "C4"));
}

TEST(ReportTest, MergeAppendsInOrder) {
  Report a, b;
  a.Error("H1", absl::StatusCode::kDataLoss, "x", Where{});
  b.Error("M3", absl::StatusCode::kDataLoss, "y", Where{});
  b.Warning("X3", "z", Where{});
  a.Merge(b);
  EXPECT_THAT(::ptd::testing::ErrorRules(a), ElementsAre("H1", "M3"));
  EXPECT_TRUE(a.HasWarning("X3"));
  EXPECT_THAT(a, HasError("M3", CodeIs(absl::StatusCode::kDataLoss)));
}

TEST(ReportTest, FirstErrorCarriesItsRule) {
  Report r;
  r.Error("C4", absl::StatusCode::kDataLoss, "segment out", Where{.file = "a.ptd"});
  r.Error("C5", absl::StatusCode::kDataLoss, "segments overlap", Where{.file = "a.ptd"});
  const absl::Status first = r.FirstError();
  EXPECT_EQ(first.message(), "a.ptd: segment out (C4)");
  EXPECT_EQ(RuleOf(first), "C4");
  EXPECT_EQ(RuleOf(ToStatus(r.errors()[1])), "C5");
}

}  // namespace
}  // namespace ptd
