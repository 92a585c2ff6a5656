// Tests of view geometry (docs/SPEC.md section 3, G1 and G2): the SPEC's
// worked examples, every layout the SPEC calls valid, each overflow step, and
// a seeded property test against a brute-force span, checked again end to end
// through WeightSet.
#include "ptd/view_geometry.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/scalar_type.h"
#include "ptd/weight_set.h"
#include "tests/testing/diagnostics.h"

namespace ptd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

GeometryResult Extent(uint32_t e, int64_t offset, std::vector<int64_t> sizes,
                      std::vector<int64_t> strides) {
  return ComputeExtent(
      ViewSpec{.element_size = e, .storage_offset = offset, .sizes = sizes, .strides = strides});
}

// required_nbytes of a view that must be valid.
uint64_t Required(uint32_t e, int64_t offset, std::vector<int64_t> sizes,
                  std::vector<int64_t> strides) {
  const GeometryResult g = Extent(e, offset, sizes, strides);
  EXPECT_TRUE(g.ok()) << g.detail;
  return g.extent.required_nbytes;
}

// --- SPEC worked examples -------------------------------------------------------

TEST(ViewGeometryTest, RowSliceOfBig) {
  // big = 8x4 float32; big[2:5]: sizes (3,4), strides (4,1), offset 8.
  const GeometryResult g = Extent(4, 8, {3, 4}, {4, 1});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 80u);
  EXPECT_EQ(g.extent.first_byte, 32u);
  EXPECT_EQ(g.extent.numel, 12u);
  EXPECT_FALSE(g.extent.empty());
}

TEST(ViewGeometryTest, CompactCloneOfRowSlice) { EXPECT_EQ(Required(4, 0, {3, 4}, {4, 1}), 48u); }

TEST(ViewGeometryTest, ColumnSliceOfBig) {
  // big = 8x8 float32; big[:, 1:3]: sizes (8,2), strides (8,1), offset 1.
  EXPECT_EQ(Required(4, 1, {8, 2}, {8, 1}), 236u);
  // Its compact clone keeps the row gaps.
  EXPECT_EQ(Required(4, 0, {8, 2}, {8, 1}), 232u);
}

// --- Layouts the SPEC calls valid ----------------------------------------------

TEST(ViewGeometryTest, BroadcastStrideZero) {
  const GeometryResult g = Extent(4, 0, {1000, 4}, {0, 1});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 16u);
  EXPECT_EQ(g.extent.numel, 4000u);
  EXPECT_EQ(Required(2, 5, {7, 9}, {0, 0}), 12u);  // One element, offset 5.
}

TEST(ViewGeometryTest, Transposed) {
  // big.t() of 8x4 float32: sizes (4,8), strides (1,4).
  EXPECT_EQ(Required(4, 0, {4, 8}, {1, 4}), 128u);
  // Transposed slice: big[2:5].t(): sizes (4,3), strides (1,4), offset 8.
  EXPECT_EQ(Required(4, 8, {4, 3}, {1, 4}), 80u);
}

TEST(ViewGeometryTest, ChannelsLast) {
  // (N,C,H,W) = (2,3,4,5) in channels-last memory: strides (60,1,15,3).
  const GeometryResult g = Extent(4, 0, {2, 3, 4, 5}, {60, 1, 15, 3});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 480u);
  EXPECT_EQ(g.extent.numel, 120u);
}

TEST(ViewGeometryTest, ZeroDim) {
  const GeometryResult g = Extent(4, 3, {}, {});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 16u);
  EXPECT_EQ(g.extent.first_byte, 12u);
  EXPECT_EQ(g.extent.numel, 1u);
}

TEST(ViewGeometryTest, EmptyNeedsNothingEvenWithHugeStrides) {
  for (const auto& [sizes, strides] :
       std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{0}, {1}},
           {{0, 5}, {kI64Max, kI64Max}},
           {{kI64Max, 0}, {kI64Max, kI64Max}},
           {{3, 4, 0}, {kI64Max / 2, kI64Max / 3, 1}}}) {
    const GeometryResult g = Extent(16, 7, sizes, strides);
    ASSERT_TRUE(g.ok()) << g.detail;
    EXPECT_EQ(g.extent.required_nbytes, 0u);
    EXPECT_EQ(g.extent.numel, 0u);
    EXPECT_TRUE(g.extent.empty());
  }
  // Even at an offset whose byte position would overflow.
  const GeometryResult g = Extent(8, kI64Max, {0}, {1});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 0u);
}

TEST(ViewGeometryTest, OverlappingViewIsValid) {
  // Sliding windows: sizes (5,4), strides (1,1).
  EXPECT_EQ(Required(4, 0, {5, 4}, {1, 1}), 32u);
}

TEST(ViewGeometryTest, ElementSizeScalesBytes) {
  EXPECT_EQ(Required(1, 0, {3, 4}, {4, 1}), 12u);
  EXPECT_EQ(Required(2, 0, {3, 4}, {4, 1}), 24u);
  EXPECT_EQ(Required(16, 0, {3, 4}, {4, 1}), 192u);
}

TEST(ViewGeometryTest, LargestViewThatFits) {
  // (o + 1) * e == 2^63 - 1 exactly with e = 1.
  EXPECT_EQ(Required(1, kI64Max - 1, {}, {}), static_cast<uint64_t>(kI64Max));
  EXPECT_EQ(Required(1, 0, {2}, {kI64Max - 1}), static_cast<uint64_t>(kI64Max));
}

// A broadcast view may have more elements than 64 bits count; the SPEC's
// arithmetic (G1) covers only the span, which here is one element.
TEST(ViewGeometryTest, BroadcastViewWithMoreThan2To64ElementsIsValid) {
  const int64_t big = int64_t{1} << 40;
  const GeometryResult g = Extent(4, 0, {big, big}, {0, 0});
  ASSERT_TRUE(g.ok()) << g.detail;
  EXPECT_EQ(g.extent.required_nbytes, 4u);
}

// --- G1: each step of the arithmetic overflows ---------------------------------------

void ExpectOverflow(uint32_t e, int64_t offset, std::vector<int64_t> sizes,
                    std::vector<int64_t> strides) {
  const GeometryResult g = Extent(e, offset, sizes, strides);
  EXPECT_EQ(g.error, GeometryError::kOverflow) << g.detail;
  EXPECT_FALSE(g.ok());
  EXPECT_FALSE(g.detail.empty());
}

TEST(ViewGeometryTest, G1StrideTimesSizeOverflows) {
  ExpectOverflow(1, 0, {3}, {int64_t{1} << 62});  // 2^62 * 2 = 2^63.
  ExpectOverflow(1, 0, {kI64Max}, {kI64Max});
}

TEST(ViewGeometryTest, G1SumOverflows) {
  ExpectOverflow(1, kI64Max - 5, {10}, {1});  // Offset + 9.
  // Each product fits; their sum does not.
  ExpectOverflow(1, 0, {2, 2}, {kI64Max / 2 + 1, kI64Max / 2 + 1});
}

TEST(ViewGeometryTest, G1PlusOneOverflows) {
  ExpectOverflow(1, kI64Max, {}, {});
  ExpectOverflow(1, 0, {2}, {kI64Max});
}

TEST(ViewGeometryTest, G1TimesElementSizeOverflows) {
  ExpectOverflow(4, 0, {int64_t{1} << 61}, {1});  // 2^61 * 4 = 2^63.
  ExpectOverflow(16, 0, {2, 2}, {int64_t{1} << 59, 1});
}

TEST(ViewGeometryTest, G1OffsetTimesElementSizeOverflows) {
  ExpectOverflow(4, int64_t{1} << 62, {}, {});
  ExpectOverflow(8, kI64Max / 8 + 1, {1}, {1});
}

TEST(ViewGeometryTest, NegativeValuesRejected) {
  EXPECT_EQ(Extent(4, -1, {3}, {1}).error, GeometryError::kNegative);
  EXPECT_EQ(Extent(4, 0, {3, -1}, {1, 1}).error, GeometryError::kNegative);
  EXPECT_EQ(Extent(4, 0, {3, 1}, {1, -1}).error, GeometryError::kNegative);
  // Negative values are rejected even in an empty view.
  EXPECT_EQ(Extent(4, 0, {0, 1}, {-1, 1}).error, GeometryError::kNegative);
  const GeometryResult g = Extent(4, 0, {3, 2}, {1, -7});
  EXPECT_THAT(g.detail, HasSubstr("-7"));
}

TEST(ViewGeometryTest, RankMismatchRejected) {
  const GeometryResult g = Extent(4, 0, {3, 4}, {4});
  EXPECT_EQ(g.error, GeometryError::kRankMismatch);
  EXPECT_THAT(g.detail, HasSubstr("2"));
  EXPECT_EQ(Extent(4, 0, {}, {1}).error, GeometryError::kRankMismatch);
}

// --- IsContiguous, ContiguousStrides ----------------------------------------------

TEST(ViewGeometryTest, ContiguousStridesAreRowMajor) {
  const std::vector<int64_t> sizes = {2, 3, 4, 5};
  EXPECT_THAT(ContiguousStrides(sizes), ElementsAre(60, 20, 5, 1));
  EXPECT_TRUE(ContiguousStrides({}).empty());
}

TEST(ViewGeometryTest, IsContiguous) {
  const auto contiguous = [](int64_t offset, std::vector<int64_t> sizes,
                             std::vector<int64_t> strides) {
    return IsContiguous(
        ViewSpec{.element_size = 4, .storage_offset = offset, .sizes = sizes, .strides = strides});
  };
  EXPECT_TRUE(contiguous(8, {3, 4}, {4, 1}));
  EXPECT_TRUE(contiguous(0, {}, {}));
  EXPECT_TRUE(contiguous(0, {3, 1, 4}, {4, 99, 1}));  // Size-1 dim: any stride.
  EXPECT_FALSE(contiguous(0, {8, 2}, {8, 1}));        // Row gaps.
  EXPECT_FALSE(contiguous(0, {4, 8}, {1, 4}));        // Transposed.
  EXPECT_FALSE(contiguous(0, {2, 3, 4, 5}, {60, 1, 15, 3}));
  EXPECT_FALSE(contiguous(0, {10, 4}, {0, 1}));  // Broadcast.
  EXPECT_FALSE(contiguous(0, {3, 4}, {4}));      // Rank mismatch.
}

// --- Property test -------------------------------------------------------------------------

struct RandomView {
  int32_t dtype = 6;
  uint32_t element_size = 4;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  uint64_t brute_required = 0;  // By enumerating every element.
  uint64_t numel = 0;
};

// The largest element offset reached, by visiting every element.
RandomView MakeRandomView(std::mt19937_64& rng) {
  RandomView v;
  v.dtype = std::uniform_int_distribution<int32_t>(0, kNumScalarTypes - 1)(rng);
  v.element_size = *ElementSize(v.dtype);
  v.offset = std::uniform_int_distribution<int64_t>(0, 100)(rng);
  const int ndim = std::uniform_int_distribution<int>(0, 5)(rng);
  for (int i = 0; i < ndim; ++i) {
    v.sizes.push_back(std::uniform_int_distribution<int64_t>(0, 7)(rng));
    v.strides.push_back(std::uniform_int_distribution<int64_t>(0, 50)(rng));
  }
  v.numel = 1;
  for (int64_t s : v.sizes) v.numel *= static_cast<uint64_t>(s);
  if (v.numel == 0) return v;
  std::vector<int64_t> idx(v.sizes.size(), 0);
  int64_t max_elem = 0;
  while (true) {
    int64_t elem = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) elem += idx[d] * v.strides[d];
    max_elem = std::max(max_elem, elem);
    size_t d = idx.size();
    while (d > 0 && ++idx[d - 1] == v.sizes[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  v.brute_required = static_cast<uint64_t>(max_elem + 1) * v.element_size;
  return v;
}

constexpr int kPropertyViews = 2000;

std::vector<RandomView> RandomViews(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RandomView> views;
  for (int i = 0; i < kPropertyViews; ++i) views.push_back(MakeRandomView(rng));
  return views;
}

TEST(ViewGeometryTest, PropertyExtentMatchesBruteForce) {
  for (const RandomView& v : RandomViews(0x9e3779b97f4a7c15)) {
    const GeometryResult g = ComputeExtent(ViewSpec{.element_size = v.element_size,
                                                    .storage_offset = v.offset,
                                                    .sizes = v.sizes,
                                                    .strides = v.strides});
    ASSERT_TRUE(g.ok()) << g.detail;
    ASSERT_EQ(g.extent.required_nbytes, v.brute_required)
        << "offset " << v.offset << " ndim " << v.sizes.size();
    ASSERT_EQ(g.extent.numel, v.numel);
    if (v.numel != 0) {
      ASSERT_EQ(g.extent.first_byte, static_cast<uint64_t>(v.offset) * v.element_size);
    }
  }
}

// Each random view over a storage of exactly required_nbytes resolves; over
// required_nbytes - 1 it fails G2 and nothing else.
TEST(ViewGeometryTest, PropertyExactStorageVerifiesOneByteLessFailsG2) {
  const std::vector<RandomView> views = RandomViews(20240601);
  PtdWriter writer;
  Manifest manifest;
  manifest.variants.push_back(Variant{.so_blob_key = "so"});
  std::mt19937_64 rng(7);
  const auto add = [&](const std::string& fqn, const RandomView& v, uint64_t n) {
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    const std::string key = "cuda_fqn_weight:cuda:" + fqn;
    ASSERT_TRUE(writer.Add(key, bytes).ok());
    manifest.entries.push_back(
        WeightEntry{.fqn = manifest.KeepName(fqn),
                    .storage_key = manifest.KeepName(key),
                    .storage_nbytes = n,
                    .dtype = v.dtype,
                    .device_type = 1,
                    .storage_offset = v.offset,
                    .sizes = DimVector(v.sizes.begin(), v.sizes.end()),
                    .strides = DimVector(v.strides.begin(), v.strides.end())});
  };
  size_t expected_g2 = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    add("fit." + std::to_string(i), views[i], views[i].brute_required);
    if (views[i].brute_required > 0) {
      add("short." + std::to_string(i), views[i], views[i].brute_required - 1);
      ++expected_g2;
    }
  }
  absl::StatusOr<std::vector<uint8_t>> file = writer.Serialize();
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Container>> container =
      Container::Open(MemorySource(*std::move(file), "random.ptd"));
  ASSERT_TRUE(container.ok()) << container.status();

  Report report;
  const SourcedManifest input{.source = "manifest", .manifest = manifest};
  const WeightSet set = WeightSet::Resolve(**container, {&input, 1}, &report);
  // Exactly the short views fail, each with G2.
  EXPECT_THAT(report.errors(),
              ::testing::Each(::testing::AllOf(
                  ::ptd::testing::RuleIs("G2"),
                  ::testing::Field(&Diagnostic::fqn,
                                   ::testing::Optional(::testing::StartsWith("short."))))));
  EXPECT_EQ(report.errors().size(), expected_g2);
  ASSERT_EQ(set.manifests().size(), 1u);
  for (const ResolvedWeight& w : set.manifests()[0].weights) {
    const bool fits = w.entry->fqn.rfind("fit.", 0) == 0;
    EXPECT_EQ(w.ok, fits) << w.entry->fqn;
    ASSERT_TRUE(w.extent.has_value()) << w.entry->fqn;
  }
}

}  // namespace
}  // namespace ptd
