// Tests of the host reference for materializing views (ptd/view_materialize.h)
// and of the dimension collapsing the CUDA device relies on
// (runtime/cuda/internal/collapsed_view.h). Both run without a GPU.
#include "ptd/view_materialize.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "runtime/cuda/internal/collapsed_view.h"

namespace ptd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Storage of n int32 elements 0, 1, 2, ...
std::vector<uint8_t> Iota32(int n) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  for (int32_t i = 0; i < n; ++i) std::memcpy(bytes.data() + 4 * i, &i, 4);
  return bytes;
}

std::vector<int32_t> Materialize32(const std::vector<uint8_t>& storage, int64_t offset,
                                   std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  const ViewSpec view{
      .element_size = 4, .storage_offset = offset, .sizes = sizes, .strides = strides};
  auto plan = PlanMaterialize(view, storage.size());
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  std::vector<uint8_t> out(plan->output_nbytes);
  EXPECT_TRUE(MaterializeOnHost(storage, view, absl::MakeSpan(out)).ok());
  std::vector<int32_t> values(out.size() / 4);
  if (!out.empty()) std::memcpy(values.data(), out.data(), out.size());
  return values;
}

TEST(MaterializeOnHostTest, ContiguousIsACopy) {
  EXPECT_THAT(Materialize32(Iota32(6), 0, {2, 3}, {3, 1}), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(MaterializeOnHostTest, TransposeReordersElements) {
  // A 3x2 view of a row-major 2x3 matrix.
  EXPECT_THAT(Materialize32(Iota32(6), 0, {3, 2}, {1, 3}), ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(MaterializeOnHostTest, OffsetAndBroadcast) {
  // Row 1 of a 2x3 matrix, broadcast to 2 rows.
  EXPECT_THAT(Materialize32(Iota32(6), 3, {2, 3}, {0, 1}), ElementsAre(3, 4, 5, 3, 4, 5));
}

TEST(MaterializeOnHostTest, ZeroDimIsOneElement) {
  EXPECT_THAT(Materialize32(Iota32(6), 4, {}, {}), ElementsAre(4));
}

TEST(MaterializeOnHostTest, EmptyViewWritesNothing) {
  EXPECT_THAT(Materialize32(Iota32(0), 0, {2, 0, 3}, {0, 5, 1}), ElementsAre());
}

TEST(MaterializeOnHostTest, OddElementSizeIsCopiedWhole) {
  // 3-byte elements, every other one.
  std::vector<uint8_t> storage = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int64_t> sizes = {2}, strides = {2};
  const ViewSpec view{.element_size = 3, .storage_offset = 0, .sizes = sizes, .strides = strides};
  std::vector<uint8_t> out(6);
  ASSERT_TRUE(MaterializeOnHost(storage, view, absl::MakeSpan(out)).ok());
  EXPECT_THAT(out, ElementsAre(1, 2, 3, 7, 8, 9));
}

TEST(PlanMaterializeTest, RejectsWhatItCannotCopy) {
  const std::vector<int64_t> big(65, 1);
  EXPECT_THAT(
      PlanMaterialize({.element_size = 1, .sizes = big, .strides = big}, 1).status().message(),
      HasSubstr("rank 65"));
  const std::vector<int64_t> s2 = {2}, s1 = {1};
  const auto past = PlanMaterialize({.element_size = 4, .sizes = s2, .strides = s1}, 7);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(past.status().message(),
              HasSubstr("reaches byte 8 of its storage but the storage has 7"));
  const std::vector<int64_t> neg = {-1};
  EXPECT_EQ(PlanMaterialize({.element_size = 4, .sizes = neg, .strides = s1}, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanMaterialize({.element_size = 0, .sizes = s2, .strides = s1}, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 2^40 x 2^40 broadcast elements from one byte.
  const std::vector<int64_t> huge = {int64_t{1} << 40, int64_t{1} << 40}, zero = {0, 0};
  EXPECT_EQ(PlanMaterialize({.element_size = 1, .sizes = huge, .strides = zero}, 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<uint8_t> storage(8), out(3);
  EXPECT_EQ(MaterializeOnHost(storage, {.element_size = 4, .sizes = s2, .strides = s1},
                              absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollapseViewTest, MergesAndDrops) {
  const std::vector<int64_t> sizes = {2, 1, 3, 4}, strides = {12, 99, 4, 1};
  const internal::CollapsedView c = internal::CollapseView(sizes, strides);
  ASSERT_EQ(c.rank, 1);
  EXPECT_EQ(c.sizes[0], 24);
  EXPECT_EQ(c.strides[0], 1);
  const std::vector<int64_t> tsizes = {4, 1, 3}, tstrides = {1, 7, 4};
  const internal::CollapsedView t = internal::CollapseView(tsizes, tstrides);
  ASSERT_EQ(t.rank, 2);
  EXPECT_EQ(t.strides[0], 1);
  EXPECT_EQ(t.strides[1], 4);
  const std::vector<int64_t> bsizes = {5, 6, 7}, bstrides = {0, 0, 1};
  const internal::CollapsedView b = internal::CollapseView(bsizes, bstrides);
  ASSERT_EQ(b.rank, 2);
  EXPECT_EQ(b.sizes[0], 30);
  EXPECT_EQ(b.strides[0], 0);
  const std::vector<int64_t> ones = {1, 1};
  EXPECT_EQ(internal::CollapseView(ones, ones).rank, 0);
}

// The collapsed view indexes the same offsets in the same order as the
// original, for random views with transposes, broadcasts and size-1 dims.
TEST(CollapseViewTest, SameOffsetsAsTheOriginalView) {
  std::mt19937_64 rng(7);
  const auto offsets = [](absl::Span<const int64_t> sizes, absl::Span<const int64_t> strides) {
    std::vector<int64_t> out;
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    for (int64_t n = 0; n < numel; ++n) {
      int64_t rest = n, off = 0;
      for (size_t d = sizes.size(); d-- > 0;) {
        off += (rest % sizes[d]) * strides[d];
        rest /= sizes[d];
      }
      out.push_back(off);
    }
    return out;
  };
  for (int iter = 0; iter < 2000; ++iter) {
    const int rank = static_cast<int>(rng() % 6);
    std::vector<int64_t> sizes(rank), strides(rank);
    for (int d = 0; d < rank; ++d) sizes[d] = 1 + static_cast<int64_t>(rng() % 4);
    // Contiguous strides, then a random permutation and random broadcasts.
    int64_t step = 1;
    for (int d = rank; d-- > 0;) {
      strides[d] = step;
      step *= sizes[d];
    }
    std::shuffle(strides.begin(), strides.end(), rng);
    for (int d = 0; d < rank; ++d) {
      if (rng() % 4 == 0) strides[d] = 0;
    }
    const internal::CollapsedView c = internal::CollapseView(sizes, strides);
    ASSERT_EQ(offsets(absl::MakeConstSpan(c.sizes, c.rank), absl::MakeConstSpan(c.strides, c.rank)),
              offsets(sizes, strides))
        << "iteration " << iter;
  }
}

}  // namespace
}  // namespace ptd
