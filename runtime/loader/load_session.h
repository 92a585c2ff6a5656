// The one orchestration of a load from files, shared by `ptd-load` and the
// Python module: with the device the front end opened, refuse the options
// that cannot apply to it (InapplicableLoadOption; the front end words the
// finding), verify once, and load from the verified bundle with the
// verification's seconds counted in the load's timings. Header-only: its
// front ends link ptd::verify and ptd::loader, the libraries do not link
// each other.
#ifndef PTD_RUNTIME_LOADER_LOAD_SESSION_H_
#define PTD_RUNTIME_LOADER_LOAD_SESSION_H_

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/verify.h"
#include "runtime/loader/place.h"

namespace ptd::internal {

// What opening a load found. Exactly one of: `inapplicable` set (nothing was
// verified), or `outcome` set (its exit_code() says whether to load).
struct VerifiedLoad {
  std::shared_ptr<Device> device;
  std::optional<LoadOptionField> inapplicable;
  std::optional<VerifyOutcome> outcome;
  double verify_s = 0;  // The verification's wall time.
  // The device was told what the load will allocate (HintLoadAllocation);
  // LoadVerified drops what the load did not take.
  bool hinted = false;

  // True when the files passed and the load may go on.
  bool loadable() const { return outcome && outcome->exit_code() == 0; }
};

// Checks `load` against `device`, then runs `verify`.
inline VerifiedLoad VerifyForLoad(std::shared_ptr<Device> device, const VerifyOptions& verify,
                                  const LoadOptions& load) {
  VerifiedLoad v;
  v.device = std::move(device);
  v.inapplicable = InapplicableLoadOption(v.device->kind(), load);
  if (v.inapplicable) return v;
  const auto t0 = std::chrono::steady_clock::now();
  // The load's memory is readied while the files verify.
  v.hinted = HintLoadAllocation(*v.device, verify.paths, load);
  v.outcome.emplace(RunVerify(verify));
  v.verify_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (v.hinted && !v.loadable()) v.device->PrepareAllocation(0);
  return v;
}

// Loads from `v`'s verified bundle (v.loadable()); the timings count the
// verification. The result shares the bundle.
inline absl::StatusOr<LoadedWeights> LoadVerified(const VerifiedLoad& v, LoadOptions load) {
  if (!v.loadable()) return absl::FailedPreconditionError("the files did not verify");
  load.verify_s = v.verify_s;
  absl::StatusOr<LoadedWeights> loaded = LoadWeights(v.outcome->bundle, v.device, load);
  if (v.hinted) v.device->PrepareAllocation(0);  // What the load did not take.
  return loaded;
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_LOAD_SESSION_H_
