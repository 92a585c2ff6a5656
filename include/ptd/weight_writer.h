// CudaWeightWriter: the writer half of the CUDA weight format.
//
// Mirrors the exporter's collector: for each weight it takes the value being
// written (its storage bytes, its own offset, sizes and strides, and whether
// that storage is the original buffer's) and the TensorProperties of the
// original buffer; decides compact clone or not (W1, W2); checks the result
// against the bytes written (W3 = G1 + G2); and collects a .ptd (storage keys
// as the exporter names them, alignment 1, no layout, identical storages
// stored once) plus the manifest (ETCUDAFQN0, or ETCUDAFQN3 when asked). Rejections keep the
// exporter's wording and add the rule ID (docs/SPEC.md section 3).
//
// Example:
//   CudaWeightWriter w("so_blob");
//   const std::vector<uint8_t> bytes(24);  // A Float[2,3] weight, dense.
//   absl::Status st = w.Add(WeightSpec{
//       .fqn = "fc.weight",
//       .value = {.storage = bytes, .storage_offset = 0, .sizes = {2, 3}, .strides = {3, 1}},
//       .properties = {.storage_size = 24, .offset = 0, .shape = {2, 3}, .stride = {3, 1}}});
//   if (st.ok()) st = w.Write("model.ptd", "model.manifest");  // Atomic writes.
//
// Thread-safety: not thread-safe.
#ifndef PTD_WEIGHT_WRITER_H_
#define PTD_WEIGHT_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"

namespace ptd {

// The original buffer, as torch's TensorProperties describe it.
struct TensorProperties {
  std::optional<uint64_t> storage_size;  // Bytes, when known.
  int64_t offset = 0;                    // Elements.
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

// The value the exporter writes for a weight.
struct WeightValue {
  absl::Span<const uint8_t> storage;  // All n bytes of the value's storage.
  int64_t storage_offset = 0;         // The value's own offset (elements).
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool is_original_storage = false;  // Storage is the original buffer's.
};

struct WeightSpec {
  std::string fqn;
  int32_t dtype = 6;  // ScalarType numbering.
  int32_t device_type = kDeviceTypeCuda;
  WeightValue value;
  TensorProperties properties;
};

// StorageKeyFor (ptd/manifest.h) names each weight's storage.

class CudaWeightWriter {
 public:
  // `variants` describe the AOTI libraries; library-local constants
  // (`_tensor_constant*`) are keyed by `so_blob_key` of the library being
  // written. With no variants, one untargeted variant of `so_blob_key` is
  // recorded. `manifest_format` kFqn3 writes the layout the executorch 1.5.1
  // release reads; it needs exactly one untargeted variant (else
  // EncodedManifest() and Write() fail with InvalidArgument).
  explicit CudaWeightWriter(std::string so_blob_key, std::vector<Variant> variants = {},
                            PtdWriterOptions options = {},
                            ManifestFormat manifest_format = ManifestFormat::kFqn0);

  // Applies W1-W3 and records the weight. InvalidArgument with the
  // exporter's message and the rule when the weight is rejected; nothing is
  // recorded then.
  //
  // A runtime-owned weight (fqn "__et_offgraph_kv_*", W4) gets no storage
  // size check and no bytes in the .ptd: its entry takes the properties'
  // offset, shape and stride, and storage_nbytes = properties.storage_size,
  // else the view's required_nbytes; its value's storage is ignored (the
  // lowering declares it with 0 bytes). W3 still holds.
  absl::Status Add(const WeightSpec& weight);

  const Manifest& manifest() const { return manifest_; }
  const PtdWriter& ptd() const { return ptd_; }

  absl::StatusOr<std::vector<uint8_t>> EncodedManifest() const;
  // Writes the .ptd and, when `manifest_path` is not empty, the standalone
  // manifest; each atomically.
  absl::Status Write(const std::string& ptd_path, const std::string& manifest_path = "") const;

 private:
  absl::Status AddRuntimeOwned(const WeightSpec& weight);
  // The entry the exporter records (the properties' shape and stride) under
  // `storage_key`, or the M5/M6 refusal. Its names view `weight` and
  // `storage_key` until Record keeps them.
  absl::StatusOr<WeightEntry> NewEntry(const WeightSpec& weight, std::string_view storage_key,
                                       int64_t offset, uint64_t storage_nbytes) const;
  // Adds `entry` to the manifest, its names kept by the manifest.
  void Record(WeightEntry entry);

  std::string so_blob_key_;
  Manifest manifest_;
  absl::flat_hash_set<std::string_view> fqns_;  // Views of the manifest's names.
  PtdWriter ptd_;
};

}  // namespace ptd

#endif  // PTD_WEIGHT_WRITER_H_
