// Tests of ExtractWeights: views gathered row-major under their fqns, key
// mode, metadata digests, refusals, shards and the index, stats (N1).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/checkpoint.h"
#include "ptd/container.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/safetensors.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "tests/testing/checkpoint_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformanceCase;
using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::DataPath;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::WriteFileBytes;
using ::testing::HasSubstr;
using W = ::ptd::testing::ModelWeight;
using ::ptd::testing::Gather;
using ::ptd::testing::Iota;
using ::ptd::testing::TensorBytes;
using ::ptd::testing::WriteModel;

std::string MetadataValue(const SafetensorsFile& f, const std::string& key) {
  for (const auto& [k, v] : f.metadata()) {
    if (k == key) return v;
  }
  return "<missing>";
}

TEST(ExtractTest, WritesEachViewRowMajorWithSourceDigests) {
  TempDir dir;
  const std::vector<uint8_t> a = Iota(96);  // 24 floats.
  const std::vector<W> weights = {
      {"w.t", "k:a", 6, 0, {4, 6}, {1, 4}},     // Transposed.
      {"w.rows", "k:a", 6, 4, {2, 4}, {4, 1}},  // Shares bytes with w.t.
      {"b", "k:b", 15, 1, {3}, {2}},            // Strided bf16.
  };
  const std::vector<uint8_t> b = Iota(16, 100);
  BundlePaths paths = WriteModel(dir, {{"k:a", a}, {"k:b", b}}, weights);
  const std::string out = dir.File("out.safetensors");
  auto r = ExtractWeights(paths, out);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].name, "w.t");
  EXPECT_EQ(r->tensors[0].shape, (std::vector<uint64_t>{4, 6}));
  EXPECT_EQ(r->tensors[0].file, out);
  EXPECT_EQ(r->tensors[2].scalar_type, 15);
  EXPECT_EQ(r->files, std::vector<std::string>{out});

  auto f = ::ptd::testing::OpenSafetensors(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(TensorBytes(*f, "w.t"), Gather(a, weights[0], 4));
  EXPECT_EQ(TensorBytes(*f, "w.rows"), Gather(a, weights[1], 4));
  EXPECT_EQ(TensorBytes(*f, "b"), Gather(b, weights[2], 2));
  EXPECT_EQ(f->Find("b")->dtype->name, "BF16");
  EXPECT_EQ(MetadataValue(*f, "ptd"), paths.ptd);
  EXPECT_EQ(MetadataValue(*f, "ptd.sha256"), Sha256Hex(ReadFileBytes(paths.ptd)));
  EXPECT_EQ(MetadataValue(*f, "manifest.sha256"), Sha256Hex(ReadFileBytes(*paths.manifest)));
}

TEST(ExtractTest, KeyModeWritesEachKeyAsBytes) {
  TempDir dir;
  const std::string ptd = DataPath("executorch/mlp_xnnpack.ptd");
  auto r = ExtractWeights(BundlePaths{.ptd = ptd}, dir.File("x.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  auto f = ::ptd::testing::OpenSafetensors(dir.File("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto src = OpenFile(ptd, false);
  auto c = Container::Open(*src);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(f->tensors().size(), (*c)->named_data().size());
  for (const NamedDataEntry& n : (*c)->named_data()) {
    const SafetensorsTensor* t = f->Find(std::string(n.key));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype->name, "U8");
    auto bytes = (*c)->Get(n.key);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(t->shape, std::vector<uint64_t>{bytes->size()});
    EXPECT_EQ(TensorBytes(*f, std::string(n.key)),
              std::vector<uint8_t>(bytes->span().begin(), bytes->span().end()));
  }
}

TEST(ExtractTest, RefusesDtypeWithoutSafetensorsName) {
  TempDir dir;
  BundlePaths paths = WriteModel(dir, {{"k", Iota(16)}}, {{"cplx", "k", 9, 0, {2}, {1}}});
  auto r = ExtractWeights(paths, dir.File("o.safetensors"));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("'cplx'"));
  EXPECT_THAT(r.status().message(), HasSubstr("ComplexFloat"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("o.safetensors")));
}

TEST(ExtractTest, RefusesAnInvalidBundleAndLeavesNothing) {
  TempDir dir;
  BundlePaths paths = WriteModel(dir, {{"k", Iota(8)}}, {{"w", "k", 6, 0, {4}, {1}}});  // G2.
  auto r = ExtractWeights(paths, dir.File("o.safetensors"));
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("G2"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("o.safetensors")));
  auto s = ExtractWeights(paths, dir.File("shards"), ExtractOptions{.max_shard_size = 4});
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("shards")));
}

TEST(ExtractTest, ListsRuntimeOwnedWeightsWithoutWritingThem) {
  const auto& tc = ConformanceCase("k04_offgraph_kv_not_stored");
  TempDir dir;
  BundlePaths paths{.ptd = ConformancePath(tc["ptd"]), .manifest = ConformancePath(tc["manifest"])};
  auto r = ExtractWeights(paths, dir.File("o.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->runtime_owned.empty());
  auto f = ::ptd::testing::OpenSafetensors(dir.File("o.safetensors"));
  ASSERT_TRUE(f.ok());
  for (const std::string& fqn : r->runtime_owned) {
    EXPECT_TRUE(IsRuntimeOwnedFqn(fqn));
    EXPECT_EQ(f->Find(fqn), nullptr);
  }
  // Every stored weight's digest matches the conformance case.
  for (const auto& w : tc["weights"]) {
    if (w["sha256"].is_null()) continue;
    EXPECT_EQ(Sha256Hex(TensorBytes(*f, w["fqn"])), w["sha256"]) << w["fqn"];
  }
}

TEST(ExtractTest, ShardsAndIndex) {
  TempDir dir;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> storages;
  std::vector<W> weights;
  for (int i = 0; i < 5; ++i) {
    storages.push_back({"k" + std::to_string(i), Iota(40, static_cast<uint8_t>(i))});
    weights.push_back({"w" + std::to_string(i), "k" + std::to_string(i), 6, 0, {10}, {1}});
  }
  BundlePaths paths = WriteModel(dir, storages, weights);
  const std::string out = dir.File("shards/sub");
  auto r = ExtractWeights(paths, out, ExtractOptions{.max_shard_size = 100});
  ASSERT_TRUE(r.ok()) << r.status();
  // 40-byte tensors, at most 100 bytes a shard: 2 + 2 + 1.
  ASSERT_EQ(r->files.size(), 4u);
  EXPECT_EQ(r->files[0], out + "/" + ShardFileName(1, 3));
  EXPECT_EQ(r->files[3], out + "/" + std::string(kShardIndexFileName));
  const auto index = nlohmann::json::parse(testing::ReadFileBytes(r->files[3]));
  EXPECT_EQ(index["metadata"]["total_size"], 200);
  ASSERT_EQ(index["weight_map"].size(), 5u);
  for (const ExtractedTensor& t : r->tensors) {
    EXPECT_EQ(index["weight_map"][t.name], std::filesystem::path(t.file).filename().string());
    EXPECT_EQ(std::filesystem::path(t.file).parent_path().string(), out);
  }
  auto ckpt = SafetensorsCheckpoint::Open(r->files[3]);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (int i = 0; i < 5; ++i) {
    auto ref = ckpt->Find("w" + std::to_string(i));
    ASSERT_TRUE(ref.has_value());
    std::vector<uint8_t> got(40);
    ASSERT_TRUE(ref->file->Read(*ref->tensor, 0, absl::MakeSpan(got)).ok());
    EXPECT_EQ(got, storages[i].second);
  }
}

TEST(ExtractTest, LargeTensorGetsAShardOfItsOwn) {
  TempDir dir;
  BundlePaths paths = WriteModel(dir, {{"a", Iota(400)}, {"b", Iota(8)}},
                                 {{"a", "a", 6, 0, {100}, {1}}, {"b", "b", 6, 0, {2}, {1}}});
  auto r = ExtractWeights(paths, dir.File("s"), ExtractOptions{.max_shard_size = 16});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files.size(), 3u);  // Two shards and the index.
  EXPECT_NE(r->tensors[0].file, r->tensors[1].file);
}

TEST(ExtractTest, StatsCountNanAndInfAndWarnN1) {
  TempDir dir;
  std::vector<float> v = {1.0f, -4.0f, NAN, INFINITY, 2.5f, -INFINITY};
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  BundlePaths paths = WriteModel(dir, {{"k", bytes}, {"i", Iota(8)}},
                                 {{"bad", "k", 6, 0, {6}, {1}}, {"ints", "i", 3, 0, {2}, {1}}});
  auto r = ExtractWeights(paths, dir.File("o.safetensors"), ExtractOptions{.stats = true});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->tensors[0].stats.has_value());
  EXPECT_EQ(r->tensors[0].stats->nan, 1u);
  EXPECT_EQ(r->tensors[0].stats->inf, 2u);
  EXPECT_EQ(*r->tensors[0].stats->min, -4.0);
  EXPECT_EQ(*r->tensors[0].stats->max, 2.5);
  EXPECT_FALSE(r->tensors[1].stats.has_value());  // Not floating.
  ASSERT_EQ(r->report.warnings().size(), 1u);
  EXPECT_EQ(r->report.warnings()[0].rule, "N1");
  EXPECT_THAT(r->report.warnings()[0].message, HasSubstr("'bad'"));
}

TEST(ExtractTest, EveryOkConformanceCaseMatchesItsDigests) {
  for (const std::string& name : testing::OkConformanceCases()) {
    const auto& tc = ConformanceCase(name);
    if (tc["kind"] != "cuda") continue;
    SCOPED_TRACE(name);
    TempDir dir;
    BundlePaths paths{.ptd = ConformancePath(tc["ptd"]),
                      .manifest = ConformancePath(tc["manifest"])};
    auto r = ExtractWeights(paths, dir.File("o.safetensors"));
    ASSERT_TRUE(r.ok()) << r.status();
    auto f = ::ptd::testing::OpenSafetensors(dir.File("o.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status();
    for (const auto& w : tc["weights"]) {
      if (w["sha256"].is_null()) continue;
      EXPECT_EQ(Sha256Hex(TensorBytes(*f, w["fqn"])), w["sha256"]) << w["fqn"];
    }
  }
}

TEST(ExtractTest, FqnInSeveralManifestsIsWrittenOnceOrRefused) {
  const auto& tc = ConformanceCase("k01_view_geometry");
  TempDir dir;
  BundlePaths paths{.ptd = ConformancePath(tc["ptd"]),
                    .manifest = ConformancePath(tc["manifest"]),
                    .pte = ConformancePath(tc["pte"])};
  auto r = ExtractWeights(paths, dir.File("o.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tensors.size(), tc["weights"].size());
  auto f = ::ptd::testing::OpenSafetensors(dir.File("o.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(MetadataValue(*f, "pte.sha256"), Sha256Hex(ReadFileBytes(*paths.pte)));

  // The standalone manifest now shows one weight through another view.
  auto m = ParseManifest(ReadFileBytes(*paths.manifest));
  ASSERT_TRUE(m.ok()) << m.status();
  WeightEntry* changed = nullptr;
  for (WeightEntry& e : m->entries) {
    if (!e.sizes.empty() && e.sizes[0] > 1) {
      changed = &e;
      break;
    }
  }
  ASSERT_NE(changed, nullptr);
  changed->sizes[0] = 1;
  auto encoded = EncodeManifest(*m);
  ASSERT_TRUE(encoded.ok());
  WriteFileBytes(dir.File("changed.manifest"), *encoded);
  paths.manifest = dir.File("changed.manifest");
  auto refused = ExtractWeights(paths, dir.File("p.safetensors"));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr(std::string(changed->fqn)));
  EXPECT_THAT(refused.status().message(), HasSubstr("manifest"));
  EXPECT_THAT(refused.status().message(), HasSubstr("pte:"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("p.safetensors")));
}

}  // namespace
}  // namespace ptd
