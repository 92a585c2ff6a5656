// Tests of CudaWeightWriter, the exporter's collector (docs/SPEC.md section 3,
// W1-W3): the named exporter cases, the exporter's wording, storage keys,
// shared segments, and a round trip through the reading half and the
// verifier library.
#include "ptd/weight_writer.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/sha256.h"
#include "ptd/verify.h"
#include "ptd/view_digest.h"
#include "ptd/weight_set.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/diagnostics.h"

namespace ptd {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// `n` float32 values i * 1.5 + start, as bytes.
std::vector<uint8_t> Floats(size_t n, float start = 0) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float f = start + 1.5f * static_cast<float>(i);
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// Elements [first, first + count) of a float32 storage.
std::vector<uint8_t> Slice(const std::vector<uint8_t>& storage, size_t first, size_t count) {
  return {storage.begin() + 4 * first, storage.begin() + 4 * (first + count)};
}

// A 2-D float32 view of `storage` gathered element by element, row-major.
std::vector<uint8_t> Gather2d(absl::Span<const uint8_t> storage, int64_t offset,
                              std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < sizes[0]; ++i) {
    for (int64_t j = 0; j < sizes[1]; ++j) {
      const size_t at = 4 * static_cast<size_t>(offset + i * strides[0] + j * strides[1]);
      out.insert(out.end(), storage.begin() + at, storage.begin() + at + 4);
    }
  }
  return out;
}

// big = 8x4 float32 (128 bytes); its rows [2, 5) cloned compactly.
WeightSpec RowsClone(const std::vector<uint8_t>& clone_storage) {
  return WeightSpec{
      .fqn = "layers.0.attn.rows",
      .value = {.storage = clone_storage,
                .storage_offset = 0,
                .sizes = {3, 4},
                .strides = {4, 1},
                .is_original_storage = false},
      .properties = {.storage_size = 128, .offset = 8, .shape = {3, 4}, .stride = {4, 1}}};
}

// big = 8x8 float32 (256 bytes); big[:, 1:3] cloned with its strides kept.
WeightSpec ColsClone(const std::vector<uint8_t>& clone_storage) {
  return WeightSpec{
      .fqn = "layers.0.attn.cols",
      .value = {.storage = clone_storage,
                .storage_offset = 0,
                .sizes = {8, 2},
                .strides = {8, 1},
                .is_original_storage = false},
      .properties = {.storage_size = 256, .offset = 1, .shape = {8, 2}, .stride = {8, 1}}};
}

// A slice of a fused 192-byte qkv storage that keeps the fused storage.
WeightSpec QkvSlice(std::string fqn, const std::vector<uint8_t>& qkv, int64_t offset) {
  return WeightSpec{
      .fqn = std::move(fqn),
      .value = {.storage = qkv,
                .storage_offset = offset,
                .sizes = {4, 4},
                .strides = {4, 1},
                .is_original_storage = true},
      .properties = {.storage_size = 192, .offset = offset, .shape = {4, 4}, .stride = {4, 1}}};
}

// The bytes the writer stored for `key`.
std::vector<uint8_t> StoredBytes(const CudaWeightWriter& w, std::string_view key) {
  absl::StatusOr<std::vector<uint8_t>> file = w.ptd().Serialize();
  EXPECT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Container>> c = Container::Open(MemorySource(*std::move(file)));
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  absl::StatusOr<Bytes> b = (*c)->Get(key);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  return {b->span().begin(), b->span().end()};
}

void ExpectNothingRecorded(const CudaWeightWriter& w) {
  EXPECT_THAT(w.manifest().entries, IsEmpty());
  EXPECT_EQ(w.ptd().num_keys(), 0u);
}

// --- W1: compact clones ----------------------------------------------------------

TEST(WeightWriterTest, CompactCloneOfRowSliceWrittenAtOffsetZero) {
  const std::vector<uint8_t> big = Floats(32);
  const std::vector<uint8_t> clone = Slice(big, 8, 12);  // 48 bytes.
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(RowsClone(clone)).ok());
  ASSERT_EQ(w.manifest().entries.size(), 1u);
  const WeightEntry& e = w.manifest().entries[0];
  EXPECT_EQ(e.fqn, "layers.0.attn.rows");
  EXPECT_EQ(e.storage_key, "cuda_fqn_weight:cuda:layers.0.attn.rows");
  EXPECT_EQ(e.storage_offset, 0);
  EXPECT_EQ(e.storage_nbytes, 48u);
  EXPECT_EQ(e.dtype, 6);
  EXPECT_EQ(e.device_type, 1);
  EXPECT_THAT(e.sizes, ElementsAre(3, 4));
  EXPECT_THAT(e.strides, ElementsAre(4, 1));
  EXPECT_EQ(StoredBytes(w, e.storage_key), clone);
}

TEST(WeightWriterTest, CompactCloneOfStridedSliceKeepsItsStorage) {
  const std::vector<uint8_t> big = Floats(64);
  const std::vector<uint8_t> clone = Slice(big, 1, 58);  // 232 bytes.
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(ColsClone(clone)).ok());
  const WeightEntry& e = w.manifest().entries[0];
  EXPECT_EQ(e.storage_offset, 0);
  EXPECT_EQ(e.storage_nbytes, 232u);
  EXPECT_THAT(e.sizes, ElementsAre(8, 2));
  EXPECT_THAT(e.strides, ElementsAre(8, 1));
  EXPECT_EQ(StoredBytes(w, e.storage_key), clone);  // Byte for byte.
}

TEST(WeightWriterTest, CloneWithTooLittleStorageRejected) {
  const std::vector<uint8_t> clone = Floats(10);  // 40 bytes; the view needs 48.
  CudaWeightWriter w("so_blob");
  const absl::Status s = w.Add(RowsClone(clone));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("requires"), HasSubstr("48"), HasSubstr("40"), HasSubstr("(W1)")));
  ExpectNothingRecorded(w);
}

TEST(WeightWriterTest, EmptyOrNonUtf8FqnRejectedAtAdd) {
  const std::vector<uint8_t> clone = Floats(12);
  CudaWeightWriter w("so_blob");
  WeightSpec spec = RowsClone(clone);
  spec.fqn = "";
  EXPECT_THAT(w.Add(spec).message(), HasSubstr("(M5)"));
  spec.fqn = "bad\xFF";
  EXPECT_EQ(w.Add(spec).code(), absl::StatusCode::kInvalidArgument);
  ExpectNothingRecorded(w);
}

TEST(WeightWriterTest, CloneWithBytesPastItsViewRejected) {
  const std::vector<uint8_t> clone = Floats(16);  // 64 bytes; the view spans 48.
  CudaWeightWriter w("so_blob");
  const absl::Status s = w.Add(RowsClone(clone));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("48"), HasSubstr("64"), HasSubstr("(W1)")));
  ExpectNothingRecorded(w);
}

// --- W2: everything else keeps the TensorProperties offset ----------------------------

TEST(WeightWriterTest, SliceOfFusedStorageKeepsOffsetAndStorage) {
  const std::vector<uint8_t> qkv = Floats(48);  // 192 bytes.
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.k", qkv, 16)).ok());
  const WeightEntry& e = w.manifest().entries[0];
  EXPECT_EQ(e.storage_offset, 16);
  EXPECT_EQ(e.storage_nbytes, 192u);
  EXPECT_THAT(e.sizes, ElementsAre(4, 4));
  EXPECT_EQ(StoredBytes(w, e.storage_key), qkv);
}

TEST(WeightWriterTest, SameShapeOtherStridesIsNotAClone) {
  // A value over all of big with big[2:5]'s shape but transposed-like strides.
  const std::vector<uint8_t> big = Floats(32);  // 128 bytes.
  WeightSpec spec = RowsClone(big);
  spec.value.strides = {1, 3};
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(spec).ok());
  const WeightEntry& e = w.manifest().entries[0];
  EXPECT_EQ(e.storage_offset, 8);  // The TensorProperties offset.
  EXPECT_EQ(e.storage_nbytes, 128u);
  // The recorded geometry is always the TensorProperties'.
  EXPECT_THAT(e.sizes, ElementsAre(3, 4));
  EXPECT_THAT(e.strides, ElementsAre(4, 1));
}

TEST(WeightWriterTest, OriginalStorageWithCloneShapeIsNotAClone) {
  const std::vector<uint8_t> big = Floats(32);
  WeightSpec spec = RowsClone(big);
  spec.value.is_original_storage = true;
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(spec).ok());
  EXPECT_EQ(w.manifest().entries[0].storage_offset, 8);
  EXPECT_EQ(w.manifest().entries[0].storage_nbytes, 128u);
}

TEST(WeightWriterTest, W2StorageSmallerThanTensorProperties) {
  const std::vector<uint8_t> small = Floats(12);  // 48 bytes.
  WeightSpec spec = RowsClone(small);
  spec.fqn = "x";
  spec.value.strides = {1, 3};  // Not a clone.
  CudaWeightWriter w("so_blob");
  const absl::Status s = w.Add(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "AOTI cloned storage is smaller than its TensorProperties (48 < 128 "
            "bytes) (W2)");
  ExpectNothingRecorded(w);
}

TEST(WeightWriterTest, W3ViewPastWrittenStorage) {
  // big[:, 1:3]'s 232-byte storage recorded with the original offset 1.
  const std::vector<uint8_t> storage = Floats(58);
  WeightSpec spec = ColsClone(storage);
  spec.fqn = "x";
  spec.value.is_original_storage = true;  // Not a clone: keeps offset 1.
  spec.properties.storage_size = 232;
  CudaWeightWriter w("so_blob");
  const absl::Status s = w.Add(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "AOTI view 'x' requires 236 bytes from a 232-byte cloned "
            "storage (W3)");
  ExpectNothingRecorded(w);
}

TEST(WeightWriterTest, W3OverflowingGeometry) {
  const std::vector<uint8_t> storage = Floats(12);
  WeightSpec spec = RowsClone(storage);
  spec.value.is_original_storage = true;
  spec.properties.storage_size.reset();
  spec.properties.stride = {int64_t{1} << 62, 1};
  CudaWeightWriter w("so_blob");
  const absl::Status s = w.Add(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(W3)"));
  ExpectNothingRecorded(w);
}

// --- Storage keys ------------------------------------------------------------------------

TEST(WeightWriterTest, LibraryConstantKeyCarriesSoBlobKey) {
  const std::vector<uint8_t> c = Floats(4);
  WeightSpec spec{.fqn = "_tensor_constant0",
                  .value = {.storage = c, .sizes = {4}, .strides = {1}},
                  .properties = {.storage_size = 16, .offset = 0, .shape = {4}, .stride = {1}}};
  CudaWeightWriter w("aoti_so_blob_sm90");
  ASSERT_TRUE(w.Add(spec).ok());
  EXPECT_EQ(w.manifest().entries[0].storage_key,
            "cuda_fqn_weight:cuda:aoti_so_blob_sm90:_tensor_constant0");
}

TEST(WeightWriterTest, StorageKeyFor) {
  EXPECT_EQ(StorageKeyFor("layers.0.w", 1, "so"), "cuda_fqn_weight:cuda:layers.0.w");
  EXPECT_EQ(StorageKeyFor("layers.0.w", 0, "so"), "cuda_fqn_weight:cpu:layers.0.w");
  EXPECT_EQ(StorageKeyFor("_tensor_constant3", 0, "so"),
            "cuda_fqn_weight:cpu:so:_tensor_constant3");
}

TEST(WeightWriterTest, DefaultVariantIsUntargetedSoBlobKey) {
  CudaWeightWriter w("so_blob");
  ASSERT_EQ(w.manifest().variants.size(), 1u);
  EXPECT_EQ(w.manifest().variants[0].target_sm, 0u);
  EXPECT_EQ(w.manifest().variants[0].so_blob_key, "so_blob");
}

TEST(WeightWriterTest, ReleasedFormatWritesEtcudafqn3) {
  const std::vector<uint8_t> qkv = Floats(48);
  CudaWeightWriter w("so_blob", {}, {}, ManifestFormat::kFqn3);
  ASSERT_TRUE(w.Add(QkvSlice("q", qkv, 0)).ok());
  absl::StatusOr<std::vector<uint8_t>> bytes = w.EncodedManifest();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(std::string(bytes->begin(), bytes->begin() + 10), "ETCUDAFQN3");
  absl::StatusOr<Manifest> m = ParseManifest(*bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, ManifestFormat::kFqn3);
  EXPECT_EQ(m->variants[0].so_blob_key, "so_blob");
  ASSERT_EQ(m->entries.size(), 1u);
  EXPECT_EQ(m->entries[0].fqn, "q");
  // The default stays ETCUDAFQN0.
  CudaWeightWriter plain("so_blob");
  ASSERT_TRUE(plain.Add(QkvSlice("q", qkv, 0)).ok());
  absl::StatusOr<std::vector<uint8_t>> plain_bytes = plain.EncodedManifest();
  ASSERT_TRUE(plain_bytes.ok()) << plain_bytes.status();
  EXPECT_EQ(std::string(plain_bytes->begin(), plain_bytes->begin() + 10), "ETCUDAFQN0");
}

TEST(WeightWriterTest, ReleasedFormatNeedsOneUntargetedVariant) {
  CudaWeightWriter w(
      "a",
      {Variant{.target_sm = 80, .so_blob_key = "a"}, Variant{.target_sm = 90, .so_blob_key = "b"}},
      {}, ManifestFormat::kFqn3);
  const absl::Status s = w.EncodedManifest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("ETCUDAFQN3"), HasSubstr("has 2")));
}

TEST(WeightWriterTest, DuplicateFqnRejected) {
  const std::vector<uint8_t> qkv = Floats(48);
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(QkvSlice("q", qkv, 0)).ok());
  EXPECT_EQ(w.Add(QkvSlice("q", qkv, 16)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.manifest().entries.size(), 1u);
}

// --- Shared segments -----------------------------------------------------------------

TEST(WeightWriterTest, IdenticalStoragesShareOneSegment) {
  const std::vector<uint8_t> qkv = Floats(48);
  CudaWeightWriter w("so_blob");
  ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.q", qkv, 0)).ok());
  ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.k", qkv, 16)).ok());
  ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.v", qkv, 32)).ok());
  EXPECT_EQ(w.ptd().num_keys(), 3u);
  EXPECT_EQ(w.ptd().num_segments(), 1u);

  absl::StatusOr<std::vector<uint8_t>> file = w.ptd().Serialize();
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Container>> c = Container::Open(MemorySource(*std::move(file)));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->segments().size(), 1u);
  ASSERT_EQ((*c)->segments()[0].size, 192u);
  for (const NamedDataEntry& nd : (*c)->named_data()) EXPECT_EQ(nd.segment_index, 0u);
}

// --- Round trips ------------------------------------------------------------------------

// The weights of a small model: clones, fused slices, a library constant.
struct Model {
  std::vector<uint8_t> rows = Slice(Floats(32), 8, 12);
  std::vector<uint8_t> cols = Slice(Floats(64, 100), 1, 58);
  std::vector<uint8_t> qkv = Floats(48, -7);
  std::vector<uint8_t> constant = Floats(4, 3);

  void AddTo(CudaWeightWriter& w) const {
    ASSERT_TRUE(w.Add(RowsClone(rows)).ok());
    ASSERT_TRUE(w.Add(ColsClone(cols)).ok());
    ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.q", qkv, 0)).ok());
    ASSERT_TRUE(w.Add(QkvSlice("layers.0.attn.k", qkv, 16)).ok());
    ASSERT_TRUE(
        w.Add(WeightSpec{
                  .fqn = "_tensor_constant0",
                  .value = {.storage = constant, .sizes = {4}, .strides = {1}},
                  .properties = {.storage_size = 16, .offset = 0, .shape = {4}, .stride = {1}}})
            .ok());
  }

  // Each weight's elements, gathered by hand from the value's own bytes.
  std::vector<std::vector<uint8_t>> Expected() const {
    return {rows, Gather2d(cols, 0, {8, 2}, {8, 1}), Gather2d(qkv, 0, {4, 4}, {4, 1}),
            Gather2d(qkv, 16, {4, 4}, {4, 1}), constant};
  }
};

TEST(WeightWriterTest, RoundTripThroughReader) {
  const Model model;
  CudaWeightWriter w("so_blob");
  model.AddTo(w);
  absl::StatusOr<std::vector<uint8_t>> file = w.ptd().Serialize();
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<uint8_t>> manifest_bytes = w.EncodedManifest();
  ASSERT_TRUE(manifest_bytes.ok()) << manifest_bytes.status();

  absl::StatusOr<std::unique_ptr<Container>> c =
      Container::Open(MemorySource(*std::move(file), "model.ptd"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<Manifest> m = ParseManifest(*manifest_bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const SourcedManifest input{.source = "manifest", .manifest = *m};
  absl::StatusOr<WeightSet> set = WeightSet::Open(**c, {&input, 1});
  ASSERT_TRUE(set.ok()) << set.status();

  const auto expected = model.Expected();
  const auto& weights = set->manifests()[0].weights;
  ASSERT_EQ(weights.size(), expected.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const ResolvedWeight& rw = weights[i];
    SCOPED_TRACE(rw.entry->fqn);
    ASSERT_TRUE(rw.ok);
    const uint32_t seg = rw.named->segment_index;
    absl::StatusOr<std::string> digest = DigestView((*c)->source(), (*c)->SegmentFileOffset(seg),
                                                    rw.entry->storage_nbytes, rw.view());
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, Sha256Hex(expected[i]));
  }
}

TEST(WeightWriterTest, WrittenFilesPassTheVerifier) {
  const Model model;
  CudaWeightWriter w("so_blob");
  model.AddTo(w);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("weight_writer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string ptd_path = (dir / "model.ptd").string();
  const std::string manifest_path = (dir / "model.manifest").string();
  ASSERT_TRUE(w.Write(ptd_path, manifest_path).ok());

  for (const bool use_mmap : {true, false}) {
    VerifyOptions options;
    options.paths.ptd = ptd_path;
    options.paths.manifest = manifest_path;
    options.digest = true;
    options.paths.use_mmap = use_mmap;
    const VerifyOutcome outcome = RunVerify(options);
    const nlohmann::ordered_json outcome_json = VerifyJson(outcome);
    EXPECT_EQ(outcome.exit_code(), 0) << ::ptd::testing::Describe(outcome.report);
    EXPECT_EQ(outcome_json["ok"], true);
    const auto expected = model.Expected();
    const auto& weights = outcome_json["manifests"][0]["weights"];
    ASSERT_EQ(weights.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(weights[i]["sha256"], Sha256Hex(expected[i])) << i;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptd
