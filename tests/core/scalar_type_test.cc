// ScalarType numbering and element sizes (SPEC section 1).
#include "ptd/scalar_type.h"

#include "gtest/gtest.h"

namespace ptd {
namespace {

TEST(ScalarTypeTest, EveryKnownSizeMatchesTheSpec) {
  const uint32_t sizes[kNumScalarTypes] = {1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4,
                                           2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1,  1, 2, 4, 8};
  for (int t = 0; t < kNumScalarTypes; ++t) {
    ASSERT_TRUE(ElementSize(t).has_value()) << t;
    EXPECT_EQ(*ElementSize(t), sizes[t]) << t;
    EXPECT_NE(ScalarTypeName(t), "unknown") << t;
  }
}

TEST(ScalarTypeTest, Names) {
  EXPECT_EQ(ScalarTypeName(6), "Float");
  EXPECT_EQ(ScalarTypeName(15), "BFloat16");
  EXPECT_EQ(ScalarTypeName(24), "Float8_e4m3fn");
  EXPECT_EQ(ScalarTypeName(29), "UInt64");
}

TEST(ScalarTypeTest, UnknownValues) {
  for (int64_t t : {int64_t{-1}, int64_t{30}, int64_t{127}, int64_t{1} << 40}) {
    EXPECT_FALSE(ElementSize(t).has_value()) << t;
    EXPECT_EQ(ScalarTypeName(t), "unknown") << t;
  }
}

}  // namespace
}  // namespace ptd
