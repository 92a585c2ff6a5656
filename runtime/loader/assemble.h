// The last stage of a load, private to ptd::loader: assemble. Builds the
// LoadedWeights handed out from the plan and the filled storages: its
// storages, their keys, the weights' views, the runtime-owned entries, the
// names and dims they point into, and the statistics. The result's tables
// are built as the plan's are freed, so that few of either are alive at
// once (at 65,536 storages the plan and the tables are each some 10 MB).
#ifndef PTD_RUNTIME_LOADER_ASSEMBLE_H_
#define PTD_RUNTIME_LOADER_ASSEMBLE_H_

#include <chrono>
#include <memory>
#include <optional>

#include "absl/types/span.h"

#include "ptd/device.h"
#include "ptd/loader.h"
#include "runtime/loader/place.h"
#include "runtime/loader/plan.h"

namespace ptd::internal {

// Holds the result while a load runs: the stages add to its statistics
// and timings, Assemble fills the rest, Finish hands it out.
class LoadedWeightsAssembler {
 public:
  using Clock = LoadClock;

  explicit LoadedWeightsAssembler(std::shared_ptr<Device> device);
  ~LoadedWeightsAssembler();

  LoadStats& stats();
  LoadTimings& timings();

  // Builds the result's tables from a load that completed. Its names and
  // dims are views into the manifests and the container when `keep` holds
  // them (the keys of a load without a manifest come from the source's
  // list, so they are always copied), else copies, each kind in one
  // buffer. Sources are few and always copied.
  void Assemble(absl::Span<const ResolvedManifest> manifests, bool all_keys, LoadPlan plan,
                PlacedStorages placed, std::shared_ptr<const void> keep);

  // The result, its timings ended: total_s from `start`, and first_weight_s
  // (defined here and nowhere else): from `start` until the first storage
  // was complete (`first_complete_s`), or total_s when none was.
  LoadedWeights Finish(Clock::time_point start, std::optional<double> first_complete_s);

 private:
  class PresizedCopies;

  void BuildStorages(const Device& device, LoadPlan& plan, PlacedStorages& placed);
  void BuildStorageKeys(PresizedCopies& names, LoadPlan& plan);
  void BuildWeights(PresizedCopies& names, bool by_source, const LoadPlan& plan);
  void BuildRuntimeOwned(PresizedCopies& names, const LoadPlan& plan);

  std::unique_ptr<LoadedWeights::Impl> impl_;
};

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_ASSEMBLE_H_
