// The first stage of a load, private to ptd::loader: the plan. Which weights
// are loaded (a subset by fqn; library-local constants of the variant chosen
// for the device), one storage per storage key and placement (entries naming
// one key share it; with LoadOptions::share_segments, keys naming one stored
// segment too), and the runtime-owned
// entries that are listed rather than loaded. Nothing is allocated or read.
//
// A load runs plan (here) -> place (place.h: where each storage goes, file
// mappings, allocation) -> transfer (transfer.h: the reads and copies) ->
// assemble (assemble.h: the LoadedWeights handed out). loader.cc runs them.
#ifndef PTD_RUNTIME_LOADER_PLAN_H_
#define PTD_RUNTIME_LOADER_PLAN_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/container.h"
#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/manifest.h"
#include "ptd/weight_set.h"
#include "runtime/loader/stage_options.h"

namespace ptd::internal {

// The clock of a load's timings (LoadTimings), and the seconds since a
// point on it.
using LoadClock = std::chrono::steady_clock;
inline double SecondsSince(LoadClock::time_point t) {
  return std::chrono::duration<double>(LoadClock::now() - t).count();
}

// Where the plan binds a storage, as a Residency (ptd/device.h): kDevice,
// the load's device, or kHost, plain host memory (the storage of a CPU
// weight, device_type 0, on a device that is not the host). Storages are
// kept apart per residency: a segment that a CPU weight and a device weight
// share is loaded twice. The place stage then settles each kDevice storage:
// device memory or, by a budget, kMappedHost (host memory mapped for the
// device); on the host device every storage is kHost.
inline constexpr size_t kNumResidencies = 3;
inline constexpr size_t IndexOf(Residency r) { return static_cast<size_t>(r); }

// One distinct storage to load.
struct StorageJob {
  // The key its bytes are read through (the first named); a view into
  // strings that outlive the load.
  std::string_view key;
  uint64_t nbytes = 0;
  std::optional<ByteSource::Location> location;
  uint8_t* dest = nullptr;  // Set once allocated.
  // Storages of one run share it (kNoRun: none): a run lies in device memory
  // as in the file, at the same distances, so that the staged copy of a
  // slot's pieces of one run is one copy, gaps and all (AllocateList).
  uint32_t run = kNoRun;
  static constexpr uint32_t kNoRun = 0xffffffffu;
  // A storage with no file location (a NamedDataMap's) in a run: its
  // offset in that run, where the staged read packs it into a slot with its
  // neighbours (PlanReads) so that they share one copy.
  std::optional<uint64_t> packed_offset;
};

// A stored weight chosen for loading; 16 bytes a weight. Its placement is
// its storage's. The element size comes from the entry's dtype again, which
// the plan checked.
struct PlannedWeight {
  const WeightEntry* entry;
  uint32_t storage;   // Index into LoadPlan::storages.
  uint32_t manifest;  // Index into the load's manifests.
};
static_assert(sizeof(void*) != 8 || sizeof(PlannedWeight) == 16);

// A runtime-owned entry, listed in the result rather than loaded.
struct PlannedRuntimeOwned {
  const WeightEntry* entry;
  uint32_t manifest;
  uint32_t element_size;
  uint64_t required_nbytes;  // The verifier's extent (G1, G2 held).
};

// A storage key and the storage it names; every distinct (key, placement),
// in first-use order.
struct PlannedKey {
  uint32_t storage;
  std::string_view key;
};

struct LoadPlan {
  // The storages, in first-use (manifest) order, and each one's placement.
  std::vector<StorageJob> storages;
  std::vector<Residency> residency;
  std::vector<PlannedKey> keys;
  std::vector<PlannedWeight> weights;
  std::vector<PlannedRuntimeOwned> runtime_owned;
  // Per manifest, the variant chosen (LoadedWeights::chosen_variants).
  std::vector<std::optional<size_t>> chosen_variants;
  // A load without a manifest: the source's keys, which `storages` and
  // `keys` view (moving the plan keeps them where they are).
  std::vector<std::string> source_keys;
  uint64_t total_bytes = 0;  // Of every storage.
};

// Plans the load of `manifests` (or, with `all_keys`, of every key of
// `source`) for `device`. `container`, when not null, is the one behind
// `source`: storages are then found through its entries instead of the
// source's lookups. Errors: InvalidArgument for fqns without a manifest, a
// runtime-owned fqn or an unknown dtype (M5); NotFound for an fqn in no
// manifest or a key the source cannot read; FailedPrecondition for an fqn
// that is a constant of another variant; DataLoss (G1) for a runtime-owned
// entry without a verified extent; a variant choice's error.
absl::StatusOr<LoadPlan> PlanLoad(absl::Span<const ResolvedManifest> manifests, bool all_keys,
                                  const ByteSource& source, const Container* container,
                                  const Device& device, const PlanOptions& options);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_PLAN_H_
