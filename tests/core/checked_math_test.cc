// Overflow-checked arithmetic: nothing derived from a file may wrap.
#include "runtime/internal/checked_math.h"

#include <limits>

#include "gtest/gtest.h"

namespace ptd::internal {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

TEST(CheckedMathTest, UnsignedAddAndMul) {
  EXPECT_EQ(CheckedAdd(uint64_t{2}, uint64_t{3}), 5u);
  EXPECT_EQ(CheckedAdd(kU64Max, uint64_t{0}), kU64Max);
  EXPECT_FALSE(CheckedAdd(kU64Max, uint64_t{1}).has_value());
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, (uint64_t{1} << 31) * 2 - 1),
            (uint64_t{1} << 32) * ((uint64_t{1} << 32) - 1));
  EXPECT_FALSE(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32).has_value());
  EXPECT_EQ(CheckedMul(kU64Max, uint64_t{0}), 0u);
}

TEST(CheckedMathTest, SignedAddAndMul) {
  EXPECT_EQ(CheckedAdd(int64_t{-5}, int64_t{3}), -2);
  EXPECT_FALSE(CheckedAdd(kI64Max, int64_t{1}).has_value());
  EXPECT_FALSE(CheckedAdd(kI64Min, int64_t{-1}).has_value());
  EXPECT_EQ(CheckedMul(int64_t{-4}, int64_t{5}), -20);
  EXPECT_FALSE(CheckedMul(kI64Max, int64_t{2}).has_value());
  EXPECT_FALSE(CheckedMul(kI64Min, int64_t{-1}).has_value());
}

TEST(CheckedMathTest, RangeInsideCannotOverflow) {
  EXPECT_TRUE(RangeInside(0, 10, 10));
  EXPECT_TRUE(RangeInside(10, 0, 10));
  EXPECT_FALSE(RangeInside(11, 0, 10));
  EXPECT_FALSE(RangeInside(5, 6, 10));
  EXPECT_FALSE(RangeInside(kU64Max, 2, 10));  // offset + len would wrap.
  EXPECT_FALSE(RangeInside(2, kU64Max, 10));
  EXPECT_TRUE(RangeInside(0, kU64Max, kU64Max));
}

TEST(CheckedMathTest, AlignUp) {
  EXPECT_EQ(AlignUp(0, 128), 0u);
  EXPECT_EQ(AlignUp(1, 128), 128u);
  EXPECT_EQ(AlignUp(128, 128), 128u);
  EXPECT_EQ(AlignUp(129, 16), 144u);
  EXPECT_EQ(AlignUp(7, 3), 9u);
  EXPECT_FALSE(AlignUp(kU64Max, 16).has_value());
}

}  // namespace
}  // namespace ptd::internal
