// WeightSet: CUDA weight manifests resolved against a .ptd container.
//
// Resolution checks, for every weight of every manifest given (SPEC sections
// 3 and 5): the storage key exists (X1), the span arithmetic does not
// overflow (G1), the view fits the stored bytes (G2), the segment holds
// exactly storage_nbytes (G3), and entries sharing a storage key agree on
// storage_nbytes and device_type across all manifests (G4). Bytes of a
// segment that no view reaches (G5) and cuda_fqn_weight keys that no
// manifest references (X3) are warnings. Runtime-owned entries (the
// off-graph KV cache, SPEC section 2) skip X1 and G3; one whose key is
// stored anyway draws warning R1. Each cause is reported once: a view
// rejected by G1/G2 does not also make its segment "unreached" (G5), and an
// entry that disagrees with another on storage_nbytes (G4) is not compared
// with the segment again (G3). Work is O(entries + keys).
//
// Lifetime: the WeightSet points into the container and the
// SourcedManifests, which must outlive it (and stay where they are).
#ifndef PTD_WEIGHT_SET_H_
#define PTD_WEIGHT_SET_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/container.h"
#include "ptd/manifest.h"
#include "ptd/report.h"
#include "ptd/view_geometry.h"

namespace ptd {

// A decoded manifest and where it came from: what WeightSet resolves, what
// WeightBundle::manifests() lists, and what ResolvedManifest points to.
struct SourcedManifest {
  // kStandaloneManifestSource, or "pte:<method>:<delegate index>".
  std::string source;
  Manifest manifest;
  // The file it was read from (the manifest or the .pte): the `file` of
  // diagnostics about the manifest's own contents (G1, G2, G4). Empty: the
  // container's path.
  std::string file = {};
};

struct ResolvedWeight {
  const WeightEntry* entry = nullptr;
  const NamedDataEntry* named = nullptr;  // Null when X1 failed.
  std::optional<ViewExtent> extent;       // Null when not computable.
  // Every check passed. A stored weight can then be loaded; a runtime-owned
  // one (below) has a valid view but no bytes to load.
  bool ok = false;
  bool runtime_owned = false;  // entry->runtime_owned(): SPEC section 2.

  ViewSpec view() const;  // REQUIRES: the entry's dtype is known.
};

// A manifest's resolved weights.
struct ResolvedManifest {
  const SourcedManifest* manifest = nullptr;  // Not owned.
  std::vector<ResolvedWeight> weights;        // Same order as its entries.

  const std::string& source() const { return manifest->source; }
  const std::vector<WeightEntry>& entries() const { return manifest->manifest.entries; }
};

class WeightSet {
 public:
  // Resolves every manifest against `container`, appending each error and
  // warning to `report`.
  static WeightSet Resolve(const Container& container, absl::Span<const SourcedManifest> manifests,
                           Report* report);

  // The checks that need only the manifests (G1, G2, G4), for when the
  // container could not be read: the weights get their extents, and none is
  // ok (nothing can be loaded).
  static WeightSet CheckWithoutContainer(absl::Span<const SourcedManifest> manifests,
                                         Report* report);

  // For use: the first error as a Status.
  static absl::StatusOr<WeightSet> Open(const Container& container,
                                        absl::Span<const SourcedManifest> manifests);

  // The size of the bytes stored under a key, nullopt when there is no such
  // key: what a source other than a Container (a loader's ByteSource) knows.
  using StorageSizeFn = std::function<std::optional<uint64_t>(std::string_view key)>;

  // Resolves against storage sizes alone: G1, G2, G4 as Resolve does, X1
  // and G3 through `storage_size` (never called for a runtime-owned entry;
  // so no R1 either). Without segments there is no G5 and no
  // X3 (nothing lists the keys no manifest names), and `named` stays null;
  // a weight is ok when every check passed.
  static WeightSet ResolveSizes(absl::Span<const SourcedManifest> manifests,
                                const StorageSizeFn& storage_size, Report* report);

  const std::vector<ResolvedManifest>& manifests() const { return manifests_; }

 private:
  static WeightSet ResolveImpl(const Container* container, const StorageSizeFn* storage_size,
                               absl::Span<const SourcedManifest> manifests, Report* report);

  std::vector<ResolvedManifest> manifests_;
};

}  // namespace ptd

#endif  // PTD_WEIGHT_SET_H_
