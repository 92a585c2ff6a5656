// Tests of the N1 health scan: f16/bf16/f32/f64 decoding, chunking, and the
// warning.
#include "ptd/weight_stats.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> U16s(std::initializer_list<uint16_t> v) {
  std::vector<uint8_t> out;
  for (uint16_t x : v) {
    out.push_back(static_cast<uint8_t>(x));
    out.push_back(static_cast<uint8_t>(x >> 8));
  }
  return out;
}

template <typename T>
std::vector<uint8_t> Raw(std::initializer_list<T> v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

TEST(WeightStatsTest, DecodesHalf) {
  WeightStatsAccumulator acc(5);
  // 1.0, -2.0, +inf, NaN, the smallest subnormal, 65504 (largest finite).
  acc.Add(U16s({0x3c00, 0xc000, 0x7c00, 0x7e00, 0x0001, 0x7bff, 0xfc00}));
  const WeightStats& s = acc.stats();
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 2u);
  EXPECT_EQ(*s.min, -2.0);
  EXPECT_EQ(*s.max, 65504.0);
}

TEST(WeightStatsTest, DecodesHalfSubnormal) {
  WeightStatsAccumulator acc(5);
  acc.Add(U16s({0x0001, 0x8001}));
  EXPECT_EQ(*acc.stats().max, std::ldexp(1.0, -24));
  EXPECT_EQ(*acc.stats().min, -std::ldexp(1.0, -24));
}

TEST(WeightStatsTest, DecodesBFloat16) {
  WeightStatsAccumulator acc(15);
  // 1.0, -3.0, -inf, NaN, 0.5.
  acc.Add(U16s({0x3f80, 0xc040, 0xff80, 0x7fc0, 0x3f00}));
  const WeightStats& s = acc.stats();
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(*s.min, -3.0);
  EXPECT_EQ(*s.max, 1.0);
}

TEST(WeightStatsTest, DecodesFloatAndDouble) {
  WeightStatsAccumulator f(6);
  f.Add(Raw<float>({1.5f, -0.25f, std::numeric_limits<float>::infinity(), NAN}));
  EXPECT_EQ(f.stats().nan, 1u);
  EXPECT_EQ(f.stats().inf, 1u);
  EXPECT_EQ(*f.stats().min, -0.25);
  EXPECT_EQ(*f.stats().max, 1.5);

  WeightStatsAccumulator d(7);
  d.Add(Raw<double>({1e300, -1e-300, NAN, NAN}));
  EXPECT_EQ(d.stats().nan, 2u);
  EXPECT_EQ(d.stats().inf, 0u);
  EXPECT_EQ(*d.stats().min, -1e-300);
  EXPECT_EQ(*d.stats().max, 1e300);
}

TEST(WeightStatsTest, CarriesPartialElementsAcrossChunks) {
  const std::vector<uint8_t> bytes = Raw<float>({1.0f, 2.0f, NAN, -7.0f, 3.0f});
  WeightStatsAccumulator whole(6);
  whole.Add(bytes);
  WeightStatsAccumulator split(6);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    split.Add(absl::MakeConstSpan(bytes).subspan(i, std::min<size_t>(3, bytes.size() - i)));
  }
  EXPECT_EQ(split.stats().nan, whole.stats().nan);
  EXPECT_EQ(*split.stats().min, -7.0);
  EXPECT_EQ(*split.stats().max, 3.0);
}

TEST(WeightStatsTest, NoFiniteValuesLeavesRangeEmpty) {
  WeightStatsAccumulator acc(6);
  acc.Add(Raw<float>({NAN}));
  EXPECT_FALSE(acc.stats().min.has_value());
  EXPECT_FALSE(acc.stats().max.has_value());
  WeightStatsAccumulator empty(15);
  EXPECT_FALSE(empty.stats().min.has_value());
}

TEST(WeightStatsTest, IsStatsDtypeOnlyForFloatingTypes) {
  EXPECT_TRUE(IsStatsDtype(5));
  EXPECT_TRUE(IsStatsDtype(6));
  EXPECT_TRUE(IsStatsDtype(7));
  EXPECT_TRUE(IsStatsDtype(15));
  EXPECT_FALSE(IsStatsDtype(0));
  EXPECT_FALSE(IsStatsDtype(1));
  EXPECT_FALSE(IsStatsDtype(3));
  EXPECT_FALSE(IsStatsDtype(24));
}

TEST(WeightStatsTest, ReportsN1OnlyForNanOrInf) {
  Report report;
  ReportWeightStats(WeightStats{.min = 1.0, .max = 2.0}, Where{.fqn = "ok"}, &report);
  EXPECT_TRUE(report.warnings().empty());
  ReportWeightStats(WeightStats{.nan = 3, .inf = 1}, Where{.file = "m.ptd", .fqn = "bad.w"},
                    &report);
  ASSERT_EQ(report.warnings().size(), 1u);
  const Diagnostic& d = report.warnings()[0];
  EXPECT_EQ(d.rule, "N1");
  EXPECT_THAT(d.message, HasSubstr("'bad.w'"));
  EXPECT_THAT(d.message, HasSubstr("3 NaN"));
  EXPECT_THAT(d.message, HasSubstr("1 infinite"));
  EXPECT_EQ(d.fqn, "bad.w");
  EXPECT_TRUE(report.ok());
}

}  // namespace
}  // namespace ptd
