#include "tests/testing/rule_files.h"

#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "nlohmann/json.hpp"

#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/safetensors.h"
#include "runtime/internal/check.h"
#include "tests/testing/patch.h"
#include "tests/testing/pte_builder.h"
#include "tests/testing/raw_ptd.h"

namespace ptd::testing {
namespace {

// ---- manifests, field by field (EncodeManifest refuses invalid ones) ----

struct RawEntry {
  std::string fqn = "w";
  std::string key = "cuda_fqn_weight:cuda:w";
  uint64_t nbytes = 32;
  int32_t dtype = 6;  // Float.
  int32_t device_type = 1;
  int64_t offset = 0;
  std::vector<int64_t> sizes = {2, 4};
  std::vector<int64_t> strides = {4, 1};
};

struct RawManifest {
  std::string magic = "ETCUDAFQN0";
  std::vector<Variant> variants = {Variant{.so_blob_key = "so"}};
  std::vector<RawEntry> entries = {RawEntry{}};
};

class Out {
 public:
  void Raw(std::string_view s) { bytes_.insert(bytes_.end(), s.begin(), s.end()); }
  template <typename T>
  void Le(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // Little-endian hosts only (as the project).
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
  }
  void Str(std::string_view s) {
    Le<uint32_t>(static_cast<uint32_t>(s.size()));
    Raw(s);
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

std::vector<uint8_t> EncodeRaw(const RawManifest& m) {
  Out o;
  o.Raw(m.magic);
  o.Le<uint32_t>(static_cast<uint32_t>(m.variants.size()));
  for (const Variant& v : m.variants) {
    o.Le<uint32_t>(v.target_sm);
    o.Le<uint32_t>(v.ptx_compute);
    o.Le<uint32_t>(v.flags);
    o.Str(v.so_blob_key);
  }
  o.Le<uint32_t>(static_cast<uint32_t>(m.entries.size()));
  for (const RawEntry& e : m.entries) {
    o.Str(e.fqn);
    o.Str(e.key);
    o.Le<uint64_t>(e.nbytes);
    o.Le<int32_t>(e.dtype);
    o.Le<int32_t>(e.device_type);
    o.Le<int64_t>(e.offset);
    o.Le<uint32_t>(static_cast<uint32_t>(e.sizes.size()));
    for (int64_t s : e.sizes) o.Le<int64_t>(s);
    for (int64_t s : e.strides) o.Le<int64_t>(s);
  }
  return o.take();
}

// ---- containers ----

// The .ptd the CUDA cases share: weight storage "cuda_fqn_weight:cuda:w"
// (32 bytes, float 2x4 in the default manifest) and the library "so"
// (8 bytes), plus `extra` keys.
std::vector<uint8_t> CudaPtd(std::vector<std::pair<std::string, std::vector<uint8_t>>> extra = {}) {
  PtdWriter w;
  std::vector<uint8_t> storage(32);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<uint8_t>(i);
  PTD_CHECK(w.Add("cuda_fqn_weight:cuda:w", storage).ok());
  PTD_CHECK(w.Add("so", std::vector<uint8_t>(8, 0x5A)).ok());
  for (auto& [key, bytes] : extra) PTD_CHECK(w.Add(key, bytes).ok());
  auto bytes = w.Serialize();
  PTD_CHECK(bytes.ok());
  return *std::move(bytes);
}

std::vector<uint8_t> Raw(const RawPtd& p) { return BuildRawPtd(p); }

// ---- programs ----

// A .pte whose one CudaBackend delegate carries `payload` inline.
std::vector<uint8_t> Pte(std::vector<uint8_t> payload) {
  PteSpec spec;
  spec.plans = {
      PtePlanSpec{.name = "forward", .delegates = {PteDelegateSpec{.location = 0, .index = 0}}}};
  spec.inline_data = {std::move(payload)};
  return BuildPte(spec);
}

std::vector<uint8_t> Json(const nlohmann::ordered_json& j) {
  const std::string s = j.dump(2) + "\n";
  return std::vector<uint8_t>(s.begin(), s.end());
}

nlohmann::ordered_json WriterWeight(const std::string& fqn, uint64_t storage_nbytes,
                                    std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                    bool original, std::optional<uint64_t> storage_size,
                                    int64_t offset, std::vector<int64_t> shape,
                                    std::vector<int64_t> stride) {
  nlohmann::ordered_json props{
      {"storage_size", nullptr}, {"offset", offset}, {"shape", shape}, {"stride", stride}};
  if (storage_size) props["storage_size"] = *storage_size;
  return {{"fqn", fqn},
          {"dtype", 6},
          {"device_type", 1},
          {"value",
           {{"storage_nbytes", storage_nbytes},
            {"storage_offset", 0},
            {"sizes", sizes},
            {"strides", strides},
            {"is_original_storage", original}}},
          {"properties", props}};
}

std::vector<uint8_t> Writer(nlohmann::ordered_json weight) {
  return Json({{"so_blob_key", "so"}, {"weights", {std::move(weight)}}});
}

// ---- safetensors (S rules) ----

std::vector<uint8_t> Le64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

// A hand-made file: `header` as is (no padding), then `data` bytes 0, 1, ...
std::vector<uint8_t> RawSafetensors(const std::string& header, size_t data) {
  std::vector<uint8_t> b(8 + header.size() + data);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i);
  return b;
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& values) {
  std::vector<uint8_t> b(values.size() * 4);
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

struct StTensor {
  std::string name;
  const char* dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

// A valid file, as the library's writer lays it out.
std::vector<uint8_t> Safetensors(const std::vector<StTensor>& tensors) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const StTensor& t : tensors) {
    specs.push_back({t.name, FindSafetensorsDtype(t.dtype), t.shape});
    PTD_CHECK(specs.back().dtype != nullptr);
  }
  auto layout = PlanSafetensors(std::move(specs), {});
  PTD_CHECK(layout.ok());
  std::vector<uint8_t> out = layout->header;
  for (const SafetensorsTensor& lt : layout->tensors) {
    for (const StTensor& t : tensors) {
      if (t.name != lt.name) continue;
      PTD_CHECK(t.bytes.size() == lt.nbytes());
      out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    }
  }
  return out;
}

class Files {
 public:
  void Add(std::string name, std::vector<uint8_t> bytes) {
    files_.push_back({std::move(name), std::move(bytes)});
  }
  // A manifest case: the shared .ptd (or `ptd`) and `manifest`.
  void Manifest(const std::string& stem, const RawManifest& m,
                std::optional<std::vector<uint8_t>> ptd = std::nullopt) {
    Add(stem + ".ptd", ptd ? *ptd : CudaPtd());
    Add(stem + ".manifest", EncodeRaw(m));
  }
  std::vector<RuleFile> take() { return std::move(files_); }

 private:
  std::vector<RuleFile> files_;
};

}  // namespace

std::vector<RuleFile> RuleFiles() {
  Files f;

  // ---- H: the header ----
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    b.resize(40);
    f.Add("H1_shorter_than_64_bytes.ptd", b);
  }
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    std::memcpy(b.data() + 8, "XH01", 4);
    f.Add("H2_bad_header_magic.ptd", b);
  }
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    PatchU32(b, kHeaderLengthAt, 32);
    f.Add("H3_header_length_under_40.ptd", b);
  }
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    PatchU64(b, kSegmentDataSizeAt, ReadU64(b, kSegmentDataSizeAt) + 4096);
    f.Add("H4_data_region_past_end_of_file.ptd", b);
  }
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    b.insert(b.end(), 16, 0xEE);
    f.Add("H5_trailing_bytes.ptd", b);
  }

  // ---- C: the FlatBuffer and its tables ----
  {
    std::vector<uint8_t> b = Raw(ValidRawPtd());
    PatchU32(b, 0, 0x7FFFFFF0);  // The root table offset points far outside.
    f.Add("C1_flatbuffer_fails_verifier.ptd", b);
  }
  {
    RawPtd p = ValidRawPtd();
    p.version = 1;
    f.Add("C2_version_1.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    p.segments = std::nullopt;
    f.Add("C3_segments_missing.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    (*p.segments)[1] = RawSegment{128, 4096};
    f.Add("C4_segment_past_data_region.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    (*p.segments)[1] = RawSegment{16, 16};  // Starts inside segment 0.
    f.Add("C5_segments_overlap.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    (*p.named_data)[2].key = "a";
    f.Add("C6_duplicate_key.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    (*p.named_data)[1].segment_index = 7;
    f.Add("C7_segment_index_out_of_range.ptd", Raw(p));
  }
  {
    RawPtd p = ValidRawPtd();
    (*p.named_data)[0].layout->scalar_type = 99;
    f.Add("C8_unknown_scalar_type.ptd", Raw(p));
  }

  // ---- M: the manifest ----
  {
    RawManifest m;
    m.magic = "ETCUDAFQN7";
    f.Manifest("M1_transitional_magic", m);
  }
  {
    std::vector<uint8_t> b = EncodeRaw(RawManifest{});
    b.resize(b.size() - 12);  // Ends inside the last stride.
    f.Add("M2_ends_inside_an_entry.ptd", CudaPtd());
    f.Add("M2_ends_inside_an_entry.manifest", b);
  }
  {
    std::vector<uint8_t> b = EncodeRaw(RawManifest{});
    b.insert(b.end(), {0, 0, 0, 0});
    f.Add("M3_trailing_bytes.ptd", CudaPtd());
    f.Add("M3_trailing_bytes.manifest", b);
  }
  {
    RawManifest m;
    m.variants.push_back(Variant{.so_blob_key = "so"});  // Two untargeted.
    f.Manifest("M4_two_untargeted_variants", m);
  }
  {
    RawManifest m;
    m.entries[0].sizes = {-2, 4};
    f.Manifest("M5_negative_size", m);
  }
  {
    RawManifest m;
    m.entries.push_back(m.entries[0]);
    f.Manifest("M6_duplicate_fqn", m);
  }

  // ---- G: view geometry ----
  {
    RawManifest m;
    m.entries[0].sizes = {4, 4};
    m.entries[0].strides = {int64_t{1} << 62, 1};
    f.Manifest("G1_stride_product_overflows", m);
  }
  {
    RawManifest m;
    m.entries[0].sizes = {3, 4};  // 48 bytes from a 32-byte storage.
    f.Manifest("G2_view_past_storage", m);
  }
  {
    RawManifest m;
    m.entries[0].nbytes = 64;  // The segment holds 32.
    f.Manifest("G3_segment_size_differs", m);
  }
  {
    RawManifest m;
    RawEntry second = m.entries[0];
    second.fqn = "w_view";
    second.device_type = 0;  // Same storage key, another device type.
    m.entries.push_back(second);
    f.Manifest("G4_shared_key_disagrees", m);
  }
  {
    RawManifest m;
    m.entries[0].sizes = {2, 2};  // Reaches bytes [0, 24) of 32.
    f.Manifest("G5_unreached_tail_bytes", m);
  }

  // ---- X: manifest against container ----
  {
    RawManifest m;
    m.entries[0].key = "cuda_fqn_weight:cuda:absent";
    f.Manifest("X1_storage_key_missing", m);
  }
  {
    RawManifest m;
    m.entries[0].nbytes = 16;  // G3 (and G2) against this .ptd.
    f.Manifest("X2_storage_disagrees_with_ptd", m);
  }
  f.Manifest("X3_orphan_storage_key", RawManifest{},
             CudaPtd({{"cuda_fqn_weight:cuda:orphan", std::vector<uint8_t>(4, 1)}}));

  // ---- P: the program ----
  {
    // The extended header is optional (a program without "eh00" is the
    // whole file), the FlatBuffer identifier is not.
    std::vector<uint8_t> b = Pte(EncodeRaw(RawManifest{}));
    std::memcpy(b.data() + 4, "XT12", 4);
    f.Add("P1_bad_program_identifier.ptd", CudaPtd());
    f.Add("P1_bad_program_identifier.pte", b);
  }
  {
    PteSpec spec;
    spec.plans = {
        PtePlanSpec{.name = "forward", .delegates = {PteDelegateSpec{.location = 1, .index = 3}}}};
    f.Add("P2_payload_segment_missing.ptd", CudaPtd());
    f.Add("P2_payload_segment_missing.pte", BuildPte(spec));
  }
  {
    RawManifest m;
    m.variants[0].so_blob_key = "absent_so";
    f.Add("P3_so_blob_key_not_named_data.ptd", CudaPtd());
    f.Add("P3_so_blob_key_not_named_data.pte", Pte(EncodeRaw(m)));
  }
  f.Add("P4_legacy_payload.ptd", CudaPtd());
  f.Add("P4_legacy_payload.pte", Pte(ToBytes("so\ncuda_fqn_weight:cuda:w")));

  // ---- R: runtime-owned entries ----
  {
    // A KV-cache entry whose storage key is stored anyway (as a zero blob).
    RawManifest m;
    RawEntry kv;
    kv.fqn = "__et_offgraph_kv_layer_0_k";
    kv.key = "cuda_fqn_weight:cuda:__et_offgraph_kv_layer_0_k";
    kv.nbytes = 16;
    kv.sizes = {2, 2};
    kv.strides = {2, 1};
    m.entries.push_back(kv);
    f.Manifest("R1_runtime_owned_key_stored", m, CudaPtd({{kv.key, std::vector<uint8_t>(16, 0)}}));
  }

  // ---- U: what upstream's CUDA runtime refuses ----
  {
    RawManifest m;
    m.entries[0].dtype = 7;  // Double: 2x2 of 8 bytes = the 32-byte storage.
    m.entries[0].sizes = {2, 2};
    m.entries[0].strides = {2, 1};
    f.Manifest("U1_float64_weight", m);
  }

  // ---- D: digests ----
  f.Manifest("D1_view_over_digest_limit", RawManifest{});
  f.Add("D1_view_over_digest_limit.verify.json", Json({{"digest", true}, {"digest_limit", 16}}));

  // ---- N: the health scan (verify with stats) ----
  // N1: the default f32 [2, 4] weight holding two NaNs and one -Inf.
  {
    const float values[8] = {1.0f,  std::numeric_limits<float>::quiet_NaN(),
                             -2.0f, -std::numeric_limits<float>::infinity(),
                             0.5f,  std::numeric_limits<float>::quiet_NaN(),
                             3.0f,  4.0f};
    std::vector<uint8_t> storage(sizeof(values));
    std::memcpy(storage.data(), values, sizeof(values));
    PtdWriter w;
    PTD_CHECK(w.Add("cuda_fqn_weight:cuda:w", storage).ok());
    PTD_CHECK(w.Add("so", std::vector<uint8_t>(8, 0x5A)).ok());
    auto bytes = w.Serialize();
    PTD_CHECK(bytes.ok());
    f.Manifest("N1_nan_and_inf", RawManifest{}, *std::move(bytes));
    f.Add("N1_nan_and_inf.verify.json", Json({{"stats", true}}));
  }

  // ---- W: the writer's refusals ----
  // W1: a compact clone (own storage, the original's shape and strides)
  // with bytes past its view: 40 bytes for a 32-byte view.
  f.Add("W1_clone_with_bytes_past_view.writer.json",
        Writer(WriterWeight("x", 40, {2, 4}, {4, 1}, false, std::nullopt, 0, {2, 4}, {4, 1})));
  // W2: SPEC's example: strides differ from TensorProperties' (not a
  // clone), 48-byte storage, storage_size 128.
  f.Add("W2_storage_smaller_than_properties.writer.json",
        Writer(WriterWeight("x", 48, {3, 4}, {1, 3}, false, 128, 8, {3, 4}, {4, 1})));
  // W3: SPEC's worked example: big[:, 1:3] of an 8x8 float with the
  // original offset 1 requires 236 bytes of a 232-byte storage.
  f.Add("W3_view_past_written_storage.writer.json",
        Writer(WriterWeight("x", 232, {8, 2}, {8, 1}, true, std::nullopt, 1, {8, 2}, {8, 1})));
  // W4: a runtime-owned KV placeholder, declared with a 0-byte storage,
  // beside big[2:5]'s compact clone: accepted, with no bytes in the .ptd and
  // storage_nbytes from the view (a writer case that must be accepted).
  f.Add("W4_runtime_owned_placeholder.writer.json",
        Json({{"so_blob_key", "so"},
              {"accept", true},
              {"weights",
               {WriterWeight("big_rows", 48, {3, 4}, {4, 1}, false, 128, 8, {3, 4}, {4, 1}),
                WriterWeight("__et_offgraph_kv_layer_0_k", 0, {1, 4, 8}, {32, 8, 1}, false,
                             std::nullopt, 0, {1, 4, 8}, {32, 8, 1})}}}));

  // ---- S: safetensors files (SafetensorsFile::Open) ----
  {
    std::vector<uint8_t> b = RawSafetensors("{}", 0);
    b.resize(8 + 16, ' ');  // A 64-byte header length over 16 bytes.
    b[0] = 64;
    f.Add("S1_header_past_end_of_file.safetensors", b);
  }
  {
    std::vector<uint8_t> b = Le64(100'000'001);
    for (char c : std::string("{}      ")) b.push_back(static_cast<uint8_t>(c));
    f.Add("S2_header_length_over_limit.safetensors", b);
  }
  {
    const std::string w = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
    f.Add("S3_duplicate_tensor_name.safetensors", RawSafetensors("{" + w + "," + w + "}", 16));
  }
  f.Add("S4_unknown_dtype.safetensors",
        RawSafetensors(R"({"w":{"dtype":"Q4_0","shape":[32],"data_offsets":[0,18]}})", 18));
  f.Add("S5_shape_times_dtype_differs.safetensors",
        RawSafetensors(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20));
  f.Add("S6_offsets_overlap.safetensors",
        RawSafetensors(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                       8));
  // S7: the index maps "v" to a shard that holds only "w".
  f.Add("S7_shard_lacks_tensor.safetensors.index.json",
        Json({{"metadata", {{"total_size", 32}}},
              {"weight_map",
               {{"w", "S7_shard_lacks_tensor.shard1.safetensors"},
                {"v", "S7_shard_lacks_tensor.shard1.safetensors"}}}}));
  f.Add("S7_shard_lacks_tensor.shard1.safetensors",
        Safetensors({{"w", "F32", {2, 4}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})}}));

  // ---- S8-S10: re-weighting (Reweight: .manifest + .safetensors) ----
  const nlohmann::ordered_json no_options = {{"base", nullptr},
                                             {"rename", nlohmann::ordered_json::array()}};
  {
    // The weight is float [2, 4]; the checkpoint's tensor is [4, 2].
    f.Add("S8_shape_differs.manifest", EncodeRaw(RawManifest{}));
    f.Add("S8_shape_differs.safetensors",
          Safetensors({{"w", "F32", {4, 2}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})}}));
    f.Add("S8_shape_differs.reweight.json", Json(no_options));
  }
  {
    // "w_row1" views row 1 of "w"'s storage; the checkpoint gives it other
    // values than w's row 1.
    RawManifest m;
    RawEntry row = m.entries[0];
    row.fqn = "w_row1";
    row.offset = 4;
    row.sizes = {4};
    row.strides = {1};
    m.entries.push_back(row);
    f.Add("S9_shared_bytes_disagree.manifest", EncodeRaw(m));
    f.Add("S9_shared_bytes_disagree.safetensors",
          Safetensors({{"w", "F32", {2, 4}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})},
                       {"w_row1", "F32", {4}, F32Bytes({40, 41, 42, 43})}}));
    f.Add("S9_shared_bytes_disagree.reweight.json", Json(no_options));
  }
  {
    // "v" has stored bytes, no checkpoint tensor, and there is no base.
    RawManifest m;
    RawEntry v = m.entries[0];
    v.fqn = "v";
    v.key = "cuda_fqn_weight:cuda:v";
    v.nbytes = 16;
    v.sizes = {2, 2};
    v.strides = {2, 1};
    m.entries.push_back(v);
    f.Add("S10_tensor_missing_without_base.manifest", EncodeRaw(m));
    f.Add("S10_tensor_missing_without_base.safetensors",
          Safetensors({{"w", "F32", {2, 4}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})}}));
    f.Add("S10_tensor_missing_without_base.reweight.json", Json(no_options));
  }
  // ---- S11, S12: re-weighting warnings (the result is written) ----
  // The checkpoint also holds "unused", which no weight uses.
  f.Add("S11_tensor_unused.manifest", EncodeRaw(RawManifest{}));
  f.Add("S11_tensor_unused.safetensors",
        Safetensors({{"w", "F32", {2, 4}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})},
                     {"unused", "F32", {2}, F32Bytes({8, 9})}}));
  f.Add("S11_tensor_unused.reweight.json", Json(no_options));
  {
    // The storage is 48 bytes; "w" views the first 32: 16 are zero-filled.
    RawManifest m;
    m.entries[0].nbytes = 48;
    f.Add("S12_bytes_zero_filled.manifest", EncodeRaw(m));
    f.Add("S12_bytes_zero_filled.safetensors",
          Safetensors({{"w", "F32", {2, 4}, F32Bytes({0, 1, 2, 3, 4, 5, 6, 7})}}));
    f.Add("S12_bytes_zero_filled.reweight.json", Json(no_options));
  }
  // ---- A: signed models (a recipe: the test signs a copy of a model folder
  // with the tests' signer, then breaks it as `mutation` says; ECDSA
  // signatures are not reproducible, so the folder is made at test time) ----
  f.Add("A1_truncated_signature.signed.json", Json({{"mutation", "truncate_signature"}}));
  f.Add("A2_signed_by_another_key.signed.json", Json({{"mutation", "other_key"}}));
  f.Add("A3_wrong_subject_digest.signed.json", Json({{"mutation", "wrong_subject_digest"}}));
  f.Add("A4_ptd_not_signed.signed.json", Json({{"mutation", "ptd_not_signed"}}));
  f.Add("A5_weight_byte_changed.signed.json", Json({{"mutation", "flip_weight_byte"}}));
  f.Add("A6_unsigned_file_in_folder.signed.json", Json({{"mutation", "extra_file"}}));
  f.Add("A7_blake3.signed.json", Json({{"mutation", "blake3"}}));

  return f.take();
}

}  // namespace ptd::testing
