// The loader and runtime-owned entries (docs/SPEC.md section 2, the
// off-graph KV cache): verified, listed with their geometry, never read,
// allocated or looked up in the source; --fqn on one is an error.
#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/byte_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/manifest.h"
#include "ptd/weight_writer.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformancePath;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::string_view kKvPrefix = "cuda_fqn_weight:cuda:__et_offgraph_kv_";

bool IsKvKey(std::string_view key) { return key.substr(0, kKvPrefix.size()) == kKvPrefix; }

BundlePaths K04() {
  return BundlePaths{.ptd = ConformancePath("files/k04_offgraph_kv_not_stored.ptd"),
                     .manifest = ConformancePath("files/k04_offgraph_kv_not_stored.manifest")};
}

// Records every key the loader asks about.
class RecordingSource : public ByteSource {
 public:
  explicit RecordingSource(std::unique_ptr<ByteSource> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::vector<std::string> Keys() const override { return inner_->Keys(); }
  absl::StatusOr<uint64_t> Size(std::string_view key) const override {
    Note(key);
    return inner_->Size(key);
  }
  absl::Status ReadAt(std::string_view key, uint64_t offset,
                      absl::Span<uint8_t> dst) const override {
    Note(key);
    return inner_->ReadAt(key, offset, dst);
  }
  std::optional<Location> Locate(std::string_view key) const override {
    Note(key);
    return inner_->Locate(key);
  }
  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    return inner_->ReadLocated(offset, dst);
  }
  std::set<std::string> asked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  void Note(std::string_view key) const {
    std::lock_guard<std::mutex> lock(mu_);
    asked_.emplace(key);
  }
  std::unique_ptr<ByteSource> inner_;
  mutable std::mutex mu_;
  mutable std::set<std::string> asked_;
};

TEST(RuntimeOwnedLoadTest, ListedWithTheirGeometryNotLoaded) {
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(K04(), device);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().weights, 5u);
  EXPECT_EQ(w->stats().runtime_owned, 4u);
  EXPECT_EQ(w->stats().reused, 2u);  // wk and wv share wq's qkv storage.
  ASSERT_EQ(w->runtime_owned().size(), 4u);
  std::vector<std::string> fqns;
  for (const RuntimeOwnedWeight& r : w->runtime_owned()) fqns.emplace_back(r.fqn);
  EXPECT_THAT(fqns, ElementsAre("__et_offgraph_kv_layer_0_k", "__et_offgraph_kv_layer_0_v",
                                "__et_offgraph_kv_layer_1_k", "__et_offgraph_kv_layer_1_v"));
  const RuntimeOwnedWeight& k1 = w->runtime_owned()[2];
  EXPECT_EQ(k1.dtype, 15);
  EXPECT_EQ(k1.element_size, 2u);
  EXPECT_THAT(k1.sizes, ElementsAre(1, 11, 2, 64));
  EXPECT_THAT(k1.strides, ElementsAre(1408, 128, 64, 1));
  EXPECT_EQ(k1.storage_offset, 0);
  EXPECT_EQ(k1.required_nbytes, 2816u);
  EXPECT_EQ(k1.storage_nbytes, 2816u);
  EXPECT_EQ(k1.storage_key, "cuda_fqn_weight:cuda:__et_offgraph_kv_layer_1_k");
  EXPECT_EQ(k1.source, "manifest");
  // Nothing of theirs was allocated: the storages are the stored weights'.
  for (const LoadedStorage& s : w->storages()) {
    for (std::string_view key : s.keys) EXPECT_FALSE(IsKvKey(key)) << key;
  }
  EXPECT_EQ(w->Find("__et_offgraph_kv_layer_0_k"), nullptr);
  EXPECT_EQ(device->stats().allocations, w->stats().storages);
}

TEST(RuntimeOwnedLoadTest, StoredZeroBlobIsNotLoadedEither) {
  // k05: layer 0's k and v are stored (R1), and still not read.
  auto w = LoadWeights(
      BundlePaths{.ptd = ConformancePath("files/k05_offgraph_kv_stored_zero_blob.ptd"),
                  .manifest = ConformancePath("files/k05_offgraph_kv_stored_zero_blob.manifest")},
      std::make_shared<HostDevice>());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->runtime_owned().size(), 4u);
  EXPECT_EQ(w->FindStorage("cuda_fqn_weight:cuda:__et_offgraph_kv_layer_0_k"), nullptr);
}

TEST(RuntimeOwnedLoadTest, FqnNamingOneIsAnError) {
  auto device = std::make_shared<HostDevice>();
  LoadOptions o;
  o.fqns = {"layers.0.norm.weight", "__et_offgraph_kv_layer_0_v"};
  auto w = LoadWeights(K04(), device, o);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(),
              AllOf(HasSubstr("__et_offgraph_kv_layer_0_v"), HasSubstr("runtime-owned"),
                    HasSubstr("no stored bytes")));
  EXPECT_EQ(device->stats().allocations, 0u);
}

TEST(RuntimeOwnedLoadTest, SubsetListsNone) {
  LoadOptions o;
  o.fqns = {"layers.0.norm.weight"};
  auto w = LoadWeights(K04(), std::make_shared<HostDevice>(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->weights().size(), 1u);
  EXPECT_THAT(w->runtime_owned(), IsEmpty());
}

TEST(RuntimeOwnedLoadTest, ByteSourceEntryNeverAsksForTheirKeys) {
  // The backend's entry point (as over an ExecuTorch NamedDataMap): the KV
  // keys are never looked up, sized or read.
  auto bundle = WeightBundle::Open(BundlePaths{.ptd = K04().ptd});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::vector<uint8_t> manifest = ::ptd::testing::ReadFileBytes(*K04().manifest);
  RecordingSource source(MakeContainerByteSource(*bundle->container()));
  auto w = LoadWeights(manifest, source, std::make_shared<HostDevice>());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->runtime_owned().size(), 4u);
  const std::set<std::string> asked = source.asked();
  EXPECT_FALSE(asked.empty());
  for (const std::string& key : asked) EXPECT_FALSE(IsKvKey(key)) << key;
}

TEST(RuntimeOwnedLoadTest, WriterPlaceholderBesideCompactCloneLoads) {
  // W4 with the seed's flows: big[2:5]'s compact clone, big[:, 1:3]'s
  // strided clone and a KV placeholder with a 0-byte storage; a truncated
  // clone is still refused.
  std::vector<uint8_t> rows(48), cols(232);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < cols.size(); ++i) cols[i] = static_cast<uint8_t>(200 - i);
  CudaWeightWriter writer("so");
  ASSERT_TRUE(
      writer
          .Add(WeightSpec{
              .fqn = "big_rows",
              .value = {.storage = rows, .sizes = {3, 4}, .strides = {4, 1}},
              .properties = {.storage_size = 128, .offset = 8, .shape = {3, 4}, .stride = {4, 1}}})
          .ok());
  ASSERT_TRUE(
      writer
          .Add(WeightSpec{
              .fqn = "big_cols",
              .value = {.storage = cols, .sizes = {8, 2}, .strides = {8, 1}},
              .properties = {.storage_size = 256, .offset = 1, .shape = {8, 2}, .stride = {8, 1}}})
          .ok());
  const absl::Status kv = writer.Add(
      WeightSpec{.fqn = "__et_offgraph_kv_layer_0_k",
                 .dtype = 15,
                 .value = {.storage = {}, .sizes = {1, 8, 2, 4}, .strides = {64, 8, 4, 1}},
                 .properties = {.offset = 0, .shape = {1, 8, 2, 4}, .stride = {64, 8, 4, 1}}});
  ASSERT_TRUE(kv.ok()) << kv;
  // A placeholder whose declared storage_size cannot hold its view: W3.
  const absl::Status small = writer.Add(WeightSpec{
      .fqn = "__et_offgraph_kv_layer_0_v",
      .dtype = 15,
      .value = {.storage = {}, .sizes = {1, 8, 2, 4}, .strides = {64, 8, 4, 1}},
      .properties = {
          .storage_size = 64, .offset = 0, .shape = {1, 8, 2, 4}, .stride = {64, 8, 4, 1}}});
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.message(),
              AllOf(HasSubstr("requires 128 bytes from a 64-byte"), HasSubstr("(W3)")));
  // A truncated clone beside them: still W1.
  std::vector<uint8_t> short_rows(40);
  const absl::Status truncated =
      writer.Add(WeightSpec{.fqn = "big_rows_short",
                            .value = {.storage = short_rows, .sizes = {3, 4}, .strides = {4, 1}},
                            .properties = {.offset = 8, .shape = {3, 4}, .stride = {4, 1}}});
  EXPECT_THAT(truncated.message(),
              AllOf(HasSubstr("requires 48 bytes from a 40-byte"), HasSubstr("(W1)")));

  const WeightEntry& entry = writer.manifest().entries.back();
  EXPECT_EQ(entry.fqn, "__et_offgraph_kv_layer_0_k");
  EXPECT_EQ(entry.storage_nbytes, 128u);   // The view's span: 64 bf16.
  EXPECT_EQ(writer.ptd().num_keys(), 2u);  // No bytes for the placeholder.

  const ::ptd::testing::TempDir dir;
  const std::string ptd = dir.File("w4.ptd"), manifest = dir.File("w4.manifest");
  ASSERT_TRUE(writer.Write(ptd, manifest).ok());
  auto w =
      LoadWeights(BundlePaths{.ptd = ptd, .manifest = manifest}, std::make_shared<HostDevice>());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->weights().size(), 2u);
  ASSERT_EQ(w->runtime_owned().size(), 1u);
  EXPECT_EQ(w->runtime_owned()[0].required_nbytes, 128u);
  const LoadedWeight* big_cols = w->Find("big_cols");
  ASSERT_NE(big_cols, nullptr);
  EXPECT_EQ(big_cols->storage_offset, 0);  // A compact clone: offset 0, 232 bytes.
  EXPECT_EQ(w->storage(*big_cols).nbytes, 232u);
}

}  // namespace
}  // namespace ptd
