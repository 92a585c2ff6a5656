// Tests of WeightBundle: the one library call that assembles a .ptd, its
// manifests (standalone or from a .pte) and the resolved weights.
#include "ptd/weight_bundle.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/manifest.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformancePath;
using ::testing::HasSubstr;

BundlePaths K01(bool use_mmap = true) {
  return BundlePaths{.ptd = ConformancePath("files/k01_view_geometry.ptd"),
                     .manifest = ConformancePath("files/k01_view_geometry.manifest"),
                     .use_mmap = use_mmap};
}

TEST(WeightBundleTest, OpensContainerAndStandaloneManifest) {
  for (bool use_mmap : {true, false}) {
    absl::StatusOr<WeightBundle> b = WeightBundle::Open(K01(use_mmap));
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_NE(b->container(), nullptr);
    EXPECT_EQ(b->program(), nullptr);
    ASSERT_EQ(b->manifests().size(), 1u);
    EXPECT_EQ(b->manifests()[0].source, "manifest");
    ASSERT_TRUE(b->weights().has_value());
    const ResolvedManifest& m = b->weights()->manifests()[0];
    ASSERT_EQ(m.weights.size(), b->manifests()[0].manifest.entries.size());
    for (const ResolvedWeight& w : m.weights) EXPECT_TRUE(w.ok) << w.entry->fqn;
  }
}

TEST(WeightBundleTest, TakesManifestsFromEveryCudaDelegateOfAPte) {
  absl::StatusOr<WeightBundle> b =
      WeightBundle::Open(BundlePaths{.ptd = ConformancePath("files/k01_view_geometry.ptd"),
                                     .pte = ConformancePath("files/k01_view_geometry.pte")});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(b->program(), nullptr);
  ASSERT_FALSE(b->manifests().empty());
  EXPECT_THAT(b->manifests()[0].source, HasSubstr("pte:"));
}

// A manifest of `n` weights (float32 4x4, keys "k<i>") with weight 0's fqn
// given twice (M6: weight 1 is named "w0" too).
std::vector<uint8_t> ManifestWithDuplicateFqn(size_t n) {
  Manifest m;
  m.variants.push_back(Variant{.target_sm = 90, .so_blob_key = "aoti_cuda_blob"});
  for (size_t i = 0; i < n; ++i) {
    m.entries.push_back(WeightEntry{.fqn = m.KeepName("w" + std::to_string(i)),
                                    .storage_key = m.KeepName("k" + std::to_string(i)),
                                    .storage_nbytes = 64,
                                    .dtype = 6,
                                    .sizes = {4, 4},
                                    .strides = {4, 1}});
  }
  std::vector<uint8_t> bytes = EncodeManifest(m).value();  // It refuses M6.
  // Weight 1's fqn "w1" (length-prefixed) becomes "w0".
  const std::string w1("\x02\x00\x00\x00w1", 6);
  auto at = std::search(bytes.begin(), bytes.end(), w1.begin(), w1.end());
  EXPECT_NE(at, bytes.end());
  if (at != bytes.end()) at[5] = '0';
  return bytes;
}

// A large manifest is decoded on a thread beside the container; the
// diagnostics come out as when the two run one after the other: the
// container's first, then the manifest's, then resolution's. Both sizes
// (one below the threshold, one above) give the same rules in that order.
TEST(WeightBundleTest, DiagnosticsKeepTheirOrderWhenTheManifestIsDecodedBeside) {
  ::ptd::testing::TempDir dir;
  for (size_t n : {size_t{4}, size_t{8000}}) {
    SCOPED_TRACE(n);
    const std::vector<uint8_t> bytes = ManifestWithDuplicateFqn(n);
    EXPECT_EQ(bytes.size() >= (256u << 10), n > 4);
    const std::string manifest = dir.File("m" + std::to_string(n) + ".manifest");
    ::ptd::testing::WriteFileBytes(manifest, bytes);
    for (bool use_mmap : {false, true}) {
      auto sources = OpenBundleSources(
          BundlePaths{.ptd = ConformancePath("files/c12_segment_past_data_region.ptd"),
                      .manifest = manifest,
                      .use_mmap = use_mmap});
      ASSERT_TRUE(sources.ok()) << sources.status();
      Report report;
      const WeightBundle b = WeightBundle::Verify(*sources, &report);
      ASSERT_NE(b.container(), nullptr);
      ASSERT_EQ(b.manifests().size(), 1u);
      EXPECT_EQ(b.manifests()[0].manifest.entries.size(), n);
      std::vector<std::string> rules;
      for (const Diagnostic& d : report.errors()) {
        if (rules.empty() || rules.back() != d.rule) rules.push_back(d.rule);
      }
      ASSERT_GE(rules.size(), 3u);
      EXPECT_EQ(rules[0], "C4");
      EXPECT_EQ(rules[1], "M6");
    }
  }
}

TEST(WeightBundleTest, ContainerAloneHasNoWeights) {
  absl::StatusOr<WeightBundle> b = WeightBundle::Open(
      BundlePaths{.ptd = ConformancePath("files/c01_layouts_and_shared_segment.ptd")});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->manifests().empty());
  EXPECT_FALSE(b->weights().has_value());
}

TEST(WeightBundleTest, OpenFailsWithTheFirstRuleAndVerifyCollectsIt) {
  const BundlePaths paths{.ptd = ConformancePath("files/k11_truncated_clone.ptd"),
                          .manifest = ConformancePath("files/k11_truncated_clone.manifest")};
  absl::StatusOr<WeightBundle> b = WeightBundle::Open(paths);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(b.status().message(), HasSubstr("(G2)"));

  absl::StatusOr<BundleSources> sources = OpenBundleSources(paths);
  ASSERT_TRUE(sources.ok());
  Report report;
  WeightBundle v = WeightBundle::Verify(*sources, &report);
  EXPECT_TRUE(report.HasError("G2"));
  ASSERT_TRUE(v.weights().has_value());
  EXPECT_FALSE(v.io_error().has_value());
}

TEST(WeightBundleTest, VerifyFromPathsCollectsWhatVerifyFromSourcesDoes) {
  const BundlePaths paths{.ptd = ConformancePath("files/k11_truncated_clone.ptd"),
                          .manifest = ConformancePath("files/k11_truncated_clone.manifest")};
  Report by_path;
  const WeightBundle b = WeightBundle::Verify(paths, &by_path);
  EXPECT_TRUE(by_path.HasError("G2"));
  ASSERT_NE(b.container(), nullptr);
  ASSERT_TRUE(b.weights().has_value());
  EXPECT_FALSE(b.io_error().has_value());

  absl::StatusOr<BundleSources> sources = OpenBundleSources(paths);
  ASSERT_TRUE(sources.ok());
  Report by_sources;
  (void)WeightBundle::Verify(*sources, &by_sources);
  EXPECT_EQ(by_path.errors().size(), by_sources.errors().size());
  EXPECT_EQ(by_path.warnings().size(), by_sources.warnings().size());
}

TEST(WeightBundleTest, VerifyFromPathsPutsAFileThatCannotBeOpenedInIoError) {
  BundlePaths paths = K01();
  paths.manifest = "/nonexistent/weights.manifest";
  Report report;
  const WeightBundle b = WeightBundle::Verify(paths, &report);
  ASSERT_TRUE(b.io_error().has_value());
  EXPECT_EQ(b.io_error()->code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(b.io_error()->message(), HasSubstr("/nonexistent/weights.manifest"));
  EXPECT_EQ(b.container(), nullptr);
  EXPECT_TRUE(b.manifests().empty());
  EXPECT_TRUE(report.ok());
}

TEST(WeightBundleTest, MissingFileIsNotFoundNamingThePath) {
  BundlePaths paths = K01();
  paths.manifest = "/nonexistent/weights.manifest";
  absl::StatusOr<WeightBundle> b = WeightBundle::Open(paths);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("/nonexistent/weights.manifest"));
}

TEST(WeightBundleTest, ResolvedWeightsSurviveAMove) {
  absl::StatusOr<WeightBundle> b = WeightBundle::Open(K01());
  ASSERT_TRUE(b.ok()) << b.status();
  WeightBundle moved = *std::move(b);
  WeightBundle again = std::move(moved);
  ASSERT_TRUE(again.weights().has_value());
  ASSERT_EQ(again.weights()->manifests().size(), 1u);
  const ResolvedManifest& m = again.weights()->manifests().front();
  ASSERT_FALSE(m.weights.empty());
  EXPECT_EQ(m.manifest, &again.manifests()[0]);
  EXPECT_EQ(m.weights[0].entry, &again.manifests()[0].manifest.entries[0]);
  EXPECT_EQ(again.container()->Find(m.weights[0].entry->storage_key), m.weights[0].named);
}

}  // namespace
}  // namespace ptd
