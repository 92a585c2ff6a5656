#include "ptd/weight_writer.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/atomic_file.h"
#include "ptd/rules.h"
#include "ptd/scalar_type.h"
#include "ptd/view_geometry.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

absl::Status Reject(std::string message, std::string_view rule) {
  return RuleError(absl::StatusCode::kInvalidArgument, rule, message);
}

}  // namespace

CudaWeightWriter::CudaWeightWriter(std::string so_blob_key, std::vector<Variant> variants,
                                   PtdWriterOptions options, ManifestFormat manifest_format)
    : so_blob_key_(std::move(so_blob_key)), ptd_(options) {
  if (variants.empty()) {
    variants.push_back(Variant{.so_blob_key = so_blob_key_});
  }
  manifest_.format = manifest_format;
  manifest_.variants = std::move(variants);
}

absl::StatusOr<WeightEntry> CudaWeightWriter::NewEntry(const WeightSpec& w,
                                                       std::string_view storage_key, int64_t offset,
                                                       uint64_t storage_nbytes) const {
  WeightEntry entry{.fqn = w.fqn,
                    .storage_key = storage_key,
                    .storage_nbytes = storage_nbytes,
                    .dtype = w.dtype,
                    .device_type = w.device_type,
                    .storage_offset = offset,
                    .sizes = DimVector(w.properties.shape.begin(), w.properties.shape.end()),
                    .strides = DimVector(w.properties.stride.begin(), w.properties.stride.end())};
  // Never record what the decoder would reject (M5, M6).
  PTD_RETURN_IF_ERROR(CheckWeightEntry(entry));
  if (fqns_.contains(w.fqn)) {
    return RuleError(absl::StatusCode::kInvalidArgument, "M6",
                     absl::StrCat("weight '", w.fqn, "' was already added"));
  }
  return entry;
}

absl::Status CudaWeightWriter::Add(const WeightSpec& w) {
  if (IsRuntimeOwnedFqn(w.fqn)) return AddRuntimeOwned(w);
  const TensorProperties& props = w.properties;
  const uint64_t n = w.value.storage.size();

  // W1: a compact clone has its own storage and the original's shape and
  // strides; it is written at offset 0 and must span its storage exactly.
  const bool clone = !w.value.is_original_storage && w.value.sizes == props.shape &&
                     w.value.strides == props.stride;
  const int64_t offset = clone ? 0 : props.offset;
  const std::string key = StorageKeyFor(w.fqn, w.device_type, so_blob_key_);
  PTD_ASSIGN_OR_RETURN(WeightEntry entry, NewEntry(w, key, offset, n));
  const uint32_t elem = *ElementSize(w.dtype);  // Known: checked above.

  // W2: any other value keeps the original's offset and storage size.
  if (!clone && props.storage_size && n < *props.storage_size) {
    return Reject(absl::StrCat("AOTI cloned storage is smaller than its "
                               "TensorProperties (",
                               n, " < ", *props.storage_size, " bytes)"),
                  "W2");
  }

  // W3 (G1, G2) against the bytes written; for a clone, W1's exact span.
  const GeometryResult g = ComputeExtent(ViewSpec{.element_size = elem,
                                                  .storage_offset = offset,
                                                  .sizes = props.shape,
                                                  .strides = props.stride});
  if (!g.ok()) {
    return Reject(absl::StrCat("AOTI view '", w.fqn, "' has invalid geometry: ", g.detail), "W3");
  }
  const uint64_t required = g.extent.required_nbytes;
  if (required > n) {
    return Reject(absl::StrCat("AOTI view '", w.fqn, "' requires ", required, " bytes from a ", n,
                               "-byte cloned storage"),
                  clone ? "W1" : "W3");
  }
  if (clone && required != n) {
    return Reject(absl::StrCat("AOTI compact clone '", w.fqn, "' requires ", required,
                               " bytes but its storage holds ", n, " (bytes past the view)"),
                  "W1");
  }

  PTD_RETURN_IF_ERROR(ptd_.Add(key, w.value.storage, /*alignment=*/1));
  Record(std::move(entry));
  return absl::OkStatus();
}

// W4: the lowering declares runtime-owned buffers with a 0-byte storage; the
// runtime allocates them. No W2, no bytes in the .ptd; the entry takes the
// TensorProperties' geometry and storage_size (else the view's span), and
// G1/G2 hold against that (W3).
absl::Status CudaWeightWriter::AddRuntimeOwned(const WeightSpec& w) {
  const TensorProperties& props = w.properties;
  const std::string key = StorageKeyFor(w.fqn, w.device_type, so_blob_key_);
  PTD_ASSIGN_OR_RETURN(WeightEntry entry, NewEntry(w, key, props.offset, 0));
  const uint32_t elem = *ElementSize(w.dtype);  // Known: checked above.
  const GeometryResult g = ComputeExtent(ViewSpec{.element_size = elem,
                                                  .storage_offset = entry.storage_offset,
                                                  .sizes = props.shape,
                                                  .strides = props.stride});
  if (!g.ok()) {
    return Reject(absl::StrCat("AOTI view '", w.fqn, "' has invalid geometry: ", g.detail), "W3");
  }
  entry.storage_nbytes = props.storage_size.value_or(g.extent.required_nbytes);
  if (g.extent.required_nbytes > entry.storage_nbytes) {
    return Reject(absl::StrCat("AOTI runtime-owned view '", w.fqn, "' requires ",
                               g.extent.required_nbytes, " bytes from a ", entry.storage_nbytes,
                               "-byte storage (TensorProperties storage_size)"),
                  "W3");
  }
  Record(std::move(entry));
  return absl::OkStatus();
}

void CudaWeightWriter::Record(WeightEntry entry) {
  entry.fqn = manifest_.KeepName(entry.fqn);
  entry.storage_key = manifest_.KeepName(entry.storage_key);
  fqns_.insert(entry.fqn);
  manifest_.entries.push_back(std::move(entry));
}

absl::StatusOr<std::vector<uint8_t>> CudaWeightWriter::EncodedManifest() const {
  return EncodeManifest(manifest_);
}

absl::Status CudaWeightWriter::Write(const std::string& ptd_path,
                                     const std::string& manifest_path) const {
  PTD_ASSIGN_OR_RETURN(std::vector<uint8_t> manifest, EncodedManifest());
  PTD_RETURN_IF_ERROR(ptd_.Write(ptd_path));
  if (!manifest_path.empty()) {
    PTD_RETURN_IF_ERROR(WriteFileAtomically(manifest_path, manifest));
  }
  return absl::OkStatus();
}

}  // namespace ptd
