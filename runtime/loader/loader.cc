// The loader's driver: LoadWeights' entry points, and the four stages of a
// load run in order: plan (plan.h) -> place (place.h) -> transfer
// (transfer.h) -> assemble (assemble.h).
#include "ptd/loader.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

#include "ptd/rules.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/assemble.h"
#include "runtime/loader/place.h"
#include "runtime/loader/plan.h"
#include "runtime/loader/signed_load.h"
#include "runtime/loader/transfer.h"

namespace ptd {

std::string_view IoModeName(IoMode mode) {
  switch (mode) {
    case IoMode::kAuto:
      return "auto";
    case IoMode::kBuffered:
      return "buffered";
    case IoMode::kDirect:
      return "direct";
    case IoMode::kGds:
      return "gds";
  }
  return "auto";
}

std::optional<IoMode> ParseIoMode(std::string_view name) {
  for (IoMode m : {IoMode::kAuto, IoMode::kBuffered, IoMode::kDirect, IoMode::kGds}) {
    if (IoModeName(m) == name) return m;
  }
  return std::nullopt;
}

using Clock = internal::LoadClock;
using internal::SecondsSince;
using internal::Sv;

namespace {

// When the call's timings start: now, less the verification the caller ran
// just before it (LoadOptions::verify_s), so that every timing counts from
// one point whoever verified.
absl::StatusOr<Clock::time_point> TimingsStart(const LoadOptions& options) {
  if (!(options.verify_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadOptions::verify_s is ", options.verify_s, "; it must be >= 0"));
  }
  return Clock::now() - std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(options.verify_s));
}

// One load: `manifests`' weights, or with `all_keys` every key of `source`
// (then `manifests` is empty). `container`, when not null, is the one behind
// `source`. `start` is when the call began and `verify_s` the verification
// it ran before this (both count in the result's timings). `keep`, when not
// null, holds the manifests and container: the result then views them.
absl::StatusOr<LoadedWeights> Load(absl::Span<const ResolvedManifest> manifests, bool all_keys,
                                   const ByteSource& source, const Container* container,
                                   std::shared_ptr<Device> device, const LoadOptions& options,
                                   Clock::time_point start, double verify_s,
                                   std::shared_ptr<const void> keep = nullptr,
                                   absl::Span<const std::string> other_paths = {}) {
  if (device == nullptr) return absl::InvalidArgumentError("LoadWeights: no device");
  if (all_keys && !options.fqns.empty()) {
    // Weights are named by a manifest; loading every key instead would be a
    // silent surprise (and may allocate what the caller did not ask for).
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadOptions::fqns names weight '", options.fqns.front(),
        "' but there is no manifest (weights are named by BundlePaths::manifest or ::pte)"));
  }
  PTD_RETURN_IF_ERROR(internal::CheckPlaceOptions(*device, options));
  internal::LoadedWeightsAssembler result(device);
  LoadTimings& timings = result.timings();
  timings.verify_s = verify_s;

  const auto plan_t0 = Clock::now();
  // A signed model: the signature, the folder and its other files first.
  PTD_ASSIGN_OR_RETURN(std::unique_ptr<internal::SignedLoad> signed_load,
                       internal::BeginSignedLoad(options.signature, options.threads, source,
                                                 other_paths, &result.stats().signature));
  PTD_ASSIGN_OR_RETURN(internal::LoadPlan plan,
                       internal::PlanLoad(manifests, all_keys, source, container, *device,
                                          internal::PlanOptionsOf(options)));
  PTD_ASSIGN_OR_RETURN(internal::PlacedStorages placed,
                       internal::Place(plan, all_keys, *device, internal::PlaceOptionsOf(options)));
  timings.plan_s = SecondsSince(plan_t0);
  // On error from here on, `placed` goes first: its buffers are freed
  // before the result lets go of the device.
  if (options.map_file) {
    const auto map_t0 = Clock::now();
    PTD_RETURN_IF_ERROR(internal::MapFromFile(source, options.threads, *device, &plan.storages,
                                              &placed, &result.stats()));
    timings.map_s = SecondsSince(map_t0);
  }
  const auto alloc_t0 = Clock::now();
  PTD_RETURN_IF_ERROR(internal::Allocate(*device, &plan.storages, plan.residency,
                                         options.mapped_block_bytes, &placed, &result.stats()));
  timings.allocate_s = SecondsSince(alloc_t0);

  std::optional<double> first_complete_s;
  PTD_RETURN_IF_ERROR(internal::TransferStorages(
      source, *device, internal::TransferOptionsOf(options), start, plan.total_bytes,
      &plan.storages, &placed, &result.stats(), &timings, &first_complete_s, signed_load.get()));

  result.Assemble(manifests, all_keys, std::move(plan), std::move(placed), std::move(keep));
  return result.Finish(start, first_complete_s);
}

// LoadWeights of a bundle; the result's views point into the bundle when
// `keep` holds it. `start` and `verify_s` as in Load.
absl::StatusOr<LoadedWeights> LoadBundle(const WeightBundle& bundle, std::shared_ptr<Device> device,
                                         const LoadOptions& options,
                                         std::shared_ptr<const void> keep, Clock::time_point start,
                                         double verify_s) {
  const Container* c = bundle.container();
  if (c == nullptr || bundle.io_error()) {
    return absl::FailedPreconditionError("LoadWeights: the bundle has no readable container");
  }
  if (bundle.weights()) {
    for (const ResolvedManifest& m : bundle.weights()->manifests()) {
      for (const ResolvedWeight& w : m.weights) {
        if (!w.ok) {
          return absl::FailedPreconditionError(
              absl::StrCat("LoadWeights: weight '", Sv(w.entry->fqn), "' (", m.source(),
                           ") failed verification; open the bundle with WeightBundle::Open"));
        }
      }
    }
  }
  // Never read through the bundle's mapping: a file truncated under it would
  // SIGBUS. (LoadOptions::map_file maps through the pread source, by choice.)
  std::shared_ptr<const FileSource> data;
  if (c->source().View(0, 0)) {
    auto reopened = OpenPreadFile(c->path());
    if (reopened.ok()) {
      if ((*reopened)->size() != c->source().size()) {
        return absl::DataLossError(absl::StrCat(c->path(), ": the file is ", (*reopened)->size(),
                                                " bytes now, ", c->source().size(),
                                                " when verified"));
      }
      data = std::move(*reopened);
    }
    // Else an in-memory source (no path to reopen): read it as it is.
  }
  const std::unique_ptr<ByteSource> source = MakeContainerByteSource(*c, std::move(data));
  // The resolved weights are parallel to the bundle's manifests, and absent
  // only without manifests.
  absl::Span<const ResolvedManifest> manifests;
  if (bundle.weights()) manifests = bundle.weights()->manifests();
  std::vector<std::string> other_paths;
  if (bundle.program() != nullptr) other_paths.push_back(bundle.program()->path());
  if (bundle.manifest_path()) other_paths.push_back(*bundle.manifest_path());
  return Load(manifests, manifests.empty(), *source, c, std::move(device), options, start, verify_s,
              std::move(keep), other_paths);
}

}  // namespace

absl::StatusOr<LoadedWeights> LoadWeights(std::shared_ptr<const WeightBundle> bundle,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  if (bundle == nullptr) return absl::InvalidArgumentError("LoadWeights: no bundle");
  PTD_ASSIGN_OR_RETURN(const Clock::time_point start, TimingsStart(options));
  const WeightBundle& b = *bundle;
  return LoadBundle(b, std::move(device), options, std::move(bundle), start, options.verify_s);
}

absl::StatusOr<LoadedWeights> LoadWeights(const BundlePaths& paths, std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  PTD_ASSIGN_OR_RETURN(const Clock::time_point start, TimingsStart(options));
  BundlePaths p = paths;
  p.use_mmap = false;
  // The load's memory is readied while the files verify.
  const bool hinted = device != nullptr && internal::HintLoadAllocation(*device, p, options);
  absl::StatusOr<WeightBundle> opened = WeightBundle::Open(p);
  if (!opened.ok()) {
    if (hinted) device->PrepareAllocation(0);
    return opened.status();
  }
  WeightBundle bundle = *std::move(opened);
  // The verification counts in this load's timings.
  absl::StatusOr<LoadedWeights> loaded =
      LoadBundle(bundle, device, options, nullptr, start, SecondsSince(start));
  if (hinted) device->PrepareAllocation(0);  // What the load did not take.
  return loaded;
}

absl::StatusOr<LoadedWeights> LoadWeights(absl::Span<const uint8_t> manifest,
                                          const ByteSource& source, std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  PTD_ASSIGN_OR_RETURN(const Clock::time_point start, TimingsStart(options));
  PTD_ASSIGN_OR_RETURN(Manifest m, ParseManifest(manifest, kStandaloneManifestSource));
  const SourcedManifest input{.source = std::string(kStandaloneManifestSource),
                              .manifest = std::move(m)};
  Report report;
  const WeightSet resolved = WeightSet::ResolveSizes(
      absl::MakeConstSpan(&input, 1),
      [&](std::string_view key) -> std::optional<uint64_t> {
        auto size = source.Size(key);
        if (!size.ok()) return std::nullopt;
        return *size;
      },
      &report);
  if (!report.ok()) {
    const absl::Status first = report.FirstError();
    return PrefixStatus(absl::StrCat(source.name(), ": "), first);
  }
  return Load(resolved.manifests(), false, source, nullptr, std::move(device), options, start,
              SecondsSince(start));
}

std::optional<LoadOptionField> InapplicableLoadOption(DeviceKind kind, const LoadOptions& options) {
  if (kind != DeviceKind::kHost) return std::nullopt;
  if (options.device_budget_bytes) return LoadOptionField::kDeviceBudgetBytes;
  if (!options.host_fqns.empty()) return LoadOptionField::kHostFqns;
  return std::nullopt;
}

}  // namespace ptd
