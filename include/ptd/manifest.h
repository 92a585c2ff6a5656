// The CUDA weight manifest (ETCUDAFQN0, ETCUDAFQN3): decoder, encoder,
// variant choice.
//
// The ExecuTorch CUDA (AOTInductor) backend describes each weight as a
// strided view into a stored storage. The manifest is the CUDA delegate's
// processed bytes in a .pte, or a standalone file. Layout and rules M1-M6:
// docs/SPEC.md section 2.
//
// Compatibility: two layouts are decoded: "ETCUDAFQN0" (variants; upstream's
// main branch) and "ETCUDAFQN3" (one so_blob_key, no variants; what the
// executorch 1.5.1 release writes), read as one untargeted variant. The other
// transitional magics (ETCUDAFQN1, 2, 4..9) are reported as Unimplemented.
#ifndef PTD_MANIFEST_H_
#define PTD_MANIFEST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/report.h"

namespace ptd {

inline constexpr std::string_view kManifestMagicFqn0 = "ETCUDAFQN0";
inline constexpr std::string_view kManifestMagicFqn3 = "ETCUDAFQN3";
inline constexpr std::string_view kManifestMagicPrefix = "ETCUDAFQN";
// The `source` of a manifest read from a standalone file; a .pte's are
// "pte:<method>:<delegate index>".
inline constexpr std::string_view kStandaloneManifestSource = "manifest";
inline constexpr uint32_t kMaxVariants = 256;
inline constexpr uint32_t kMaxManifestEntries = 1u << 20;
inline constexpr uint32_t kMaxDims = 64;
inline constexpr uint32_t kVariantFallbackOnly = 1u;

struct Variant {
  uint32_t target_sm = 0;    // 0 = untargeted.
  uint32_t ptx_compute = 0;  // 0 = no PTX.
  uint32_t flags = 0;        // Bit 0: fallback_only.
  std::string so_blob_key;
  bool fallback_only() const { return (flags & kVariantFallbackOnly) != 0; }
};

// A manifest entry's device_type (SPEC section 2): where the weight lives
// when the program runs. The entry keeps the raw int32 (a file may hold any
// value; the decoder's M5 refuses the others); code compares against these.
inline constexpr int32_t kDeviceTypeCpu = 0;
inline constexpr int32_t kDeviceTypeCuda = 1;
inline bool IsKnownDeviceType(int32_t device_type) {
  return device_type == kDeviceTypeCpu || device_type == kDeviceTypeCuda;
}

// Storage keys, as the exporter names them (SPEC section 2): one codec for
// the writer, the loader and the verifier's X3.
//   "cuda_fqn_weight:<device>:<fqn>"                  a parameter or buffer
//   "cuda_fqn_weight:<device>:<so_blob_key>:<fqn>"    a library-local constant
// <device> is "cpu" or "cuda" (device_type 0 or 1); library-local constants
// are the fqns "_tensor_constant*", numbered per compiled library.
inline constexpr std::string_view kCudaWeightKeyPrefix = "cuda_fqn_weight:";
inline constexpr std::string_view kLibraryConstantPrefix = "_tensor_constant";

// The storage key the exporter writes for `fqn` of library `so_blob_key`.
std::string StorageKeyFor(std::string_view fqn, int32_t device_type, std::string_view so_blob_key);
// True when `key` is a CUDA weight storage key (the verifier's X3 looks at
// these only).
inline bool IsCudaWeightKey(std::string_view key) {
  return key.substr(0, kCudaWeightKeyPrefix.size()) == kCudaWeightKeyPrefix;
}
// True when `key` is the storage key of a library-local constant of library
// `so_blob_key` (on either device), as StorageKeyFor writes it.
bool IsLibraryConstantKeyOf(std::string_view key, std::string_view so_blob_key);

// The fqn prefix of runtime-owned entries (SPEC section 2): the off-graph KV
// cache, whose bytes the runtime allocates itself and never reads from the
// .ptd. A byte-prefix match on the fqn, case-sensitive.
inline constexpr std::string_view kRuntimeOwnedPrefix = "__et_offgraph_kv_";

// True when `fqn` names a runtime-owned entry.
inline bool IsRuntimeOwnedFqn(std::string_view fqn) {
  return fqn.substr(0, kRuntimeOwnedPrefix.size()) == kRuntimeOwnedPrefix;
}

// A view's sizes or strides. Up to four dims live inline, so decoding a
// manifest allocates nothing per entry for them.
using DimVector = absl::InlinedVector<int64_t, 4>;

namespace internal {
struct NameArenaAccess;  // The manifest decoder's (runtime/manifest/manifest.cc).
}  // namespace internal

// Storage for the names that a Manifest's entries view: copies in blocks
// that never move or shrink, so a view stays valid while names are added and
// for as long as the arena lives; or the decoded bytes themselves, which the
// arena then keeps alive.
class NameArena {
 public:
  NameArena() = default;
  NameArena(const NameArena&) = delete;
  NameArena& operator=(const NameArena&) = delete;

  // A view of a kept copy of `name`. Thread-safe.
  std::string_view Keep(std::string_view name);

 private:
  friend struct internal::NameArenaAccess;

  // The decoder's own, through internal::NameArenaAccess:
  // Keep without the lock, for a decoder that owns the arena alone.
  std::string_view KeepUnsynchronized(std::string_view name);
  // Keeps `owner` alive as long as the arena: what owns bytes that names
  // view in place. Thread-safe.
  void Retain(std::shared_ptr<const void> owner);
  // Takes over `other`'s blocks: views into them stay valid. REQUIRES: no
  // other thread uses either arena.
  void Absorb(NameArena&& other);

  static constexpr size_t kBlockBytes = size_t{64} << 10;

  std::mutex mu_;
  std::vector<std::unique_ptr<char[]>> blocks_;
  std::vector<std::shared_ptr<const void>> owners_;
  char* next_ = nullptr;  // Free space of the newest shared block.
  size_t left_ = 0;
};

struct WeightEntry {
  // Views of names kept by the Manifest that holds the entry (its `names`
  // arena): a decoded manifest keeps them; an entry built in code views
  // names the caller keeps alive, such as literals or Manifest::KeepName.
  std::string_view fqn;
  std::string_view storage_key;
  uint64_t storage_nbytes = 0;
  int32_t dtype = 0;  // ScalarType numbering.
  int32_t device_type = kDeviceTypeCuda;
  int64_t storage_offset = 0;  // Elements.
  DimVector sizes;
  DimVector strides;  // Elements.
  // False when the decoder reported an M5/M6 error for this entry; geometry
  // checks skip such entries (their numbers are meaningless).
  bool well_formed = true;

  // A runtime-owned entry (kRuntimeOwnedPrefix): its view is checked (M5,
  // M6, G1, G2, G4) but no stored bytes are expected (no X1, no G3) and a
  // loader does not load it.
  bool runtime_owned() const { return IsRuntimeOwnedFqn(fqn); }
};

// The on-disk layout a manifest was read from, or is to be written in.
enum class ManifestFormat {
  kFqn0,  // "ETCUDAFQN0": a list of variants.
  kFqn3,  // "ETCUDAFQN3": one so_blob_key (the executorch 1.5.1 release).
};

// "ETCUDAFQN0" or "ETCUDAFQN3": the layout's magic, as reports name it.
std::string_view ManifestFormatName(ManifestFormat format);

struct Manifest {
  ManifestFormat format = ManifestFormat::kFqn0;
  // An ETCUDAFQN3 manifest has exactly one, untargeted, variant.
  std::vector<Variant> variants;
  std::vector<WeightEntry> entries;
  // The names `entries` view. Copies of a manifest share it, so their views
  // stay valid as long as any copy lives.
  std::shared_ptr<NameArena> names;

  // Keeps a copy of `name` in `names` (created on first use) and returns a
  // view of it: how code that builds entries gives them names that live as
  // long as the manifest. Thread-safe once `names` exists.
  std::string_view KeepName(std::string_view name);
};

// Decodes `bytes`, appending every M1-M6 violation to `report` (tagged with
// `where`). Returns the manifest when its structure could be read to the end
// (M1 and M2 hold), even if field-level rules (M3-M6) failed; nullopt
// otherwise. Never reads past the end; counts are bounded before allocation.
std::optional<Manifest> DecodeManifest(absl::Span<const uint8_t> bytes, const Where& where,
                                       Report* report);

// The same without copying names: the entries' names view `bytes`, and the
// manifest's arena keeps `bytes_owner` (which must keep `bytes` alive) for
// as long as any copy of the manifest lives.
std::optional<Manifest> DecodeManifest(absl::Span<const uint8_t> bytes,
                                       std::shared_ptr<const void> bytes_owner, const Where& where,
                                       Report* report);

// Strict form: the manifest, or the first violation as a Status (DataLoss,
// or Unimplemented for an unsupported version).
absl::StatusOr<Manifest> ParseManifest(absl::Span<const uint8_t> bytes,
                                       std::string_view name = "manifest");

// Encodes `manifest` byte-exactly, in the layout `manifest.format` names.
// InvalidArgument when it breaks M4-M6 (an encoder never writes what the
// decoder rejects), or when the format is kFqn3 and the manifest does not
// have exactly one untargeted variant (target_sm 0, ptx_compute 0, flags 0).
absl::StatusOr<std::vector<uint8_t>> EncodeManifest(const Manifest& manifest);

struct VariantChoice {
  size_t index = 0;      // Into Manifest::variants.
  bool via_ptx = false;  // True when the device JIT-compiles PTX.
};

// The decoder's M5 field checks of one entry (non-empty UTF-8 fqn and key,
// known dtype, device 0 or 1, no negative offset, size or stride, equal
// numbers of sizes and strides), for writers: the first violation as
// InvalidArgument.
absl::Status CheckWeightEntry(const WeightEntry& entry);

// Picks the variant a device of compute capability `sm` (e.g. 90) runs, per
// SPEC section 2; NotFound "no variant fits sm N" when none does.
absl::StatusOr<VariantChoice> SelectVariant(absl::Span<const Variant> variants, uint32_t sm);

}  // namespace ptd

#endif  // PTD_MANIFEST_H_
