#include "runtime/loader/assemble.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "ptd/scalar_type.h"
#include "runtime/loader/loaded_weights.h"

namespace ptd::internal {
namespace {

static_assert(sizeof(void*) != 8 || sizeof(LoadedWeight) == 112,
              "LoadedWeight's fields are ordered to leave no padding");

}  // namespace

// The result's names and dims: views of the originals, or copies into one
// preallocated buffer of each kind, sized before the first is added.
// Not a NameArena (ptd/manifest.h): that one grows in 64 KiB blocks, locks
// for each name and keeps owners alive, for names added over a manifest's
// life; this one knows every size up front, makes one exact allocation per
// kind, copies dims as well as names, and hands both arrays over to the
// result (ReleaseChars, ReleaseDims).
class LoadedWeightsAssembler::PresizedCopies {
 public:
  PresizedCopies(absl::Span<const ResolvedManifest> manifests, const LoadPlan& plan, bool views)
      : views_(views) {
    size_t name_bytes = 0, num_dims = 0;
    for (const ResolvedManifest& m : manifests) name_bytes += m.source().size();
    if (!views) {
      for (const PlannedKey& k : plan.keys) name_bytes += k.key.size();
      const auto count = [&](const WeightEntry& e) {
        name_bytes += e.fqn.size() + e.storage_key.size();
        num_dims += e.sizes.size() + e.strides.size();
      };
      for (const PlannedWeight& w : plan.weights) count(*w.entry);
      for (const PlannedRuntimeOwned& w : plan.runtime_owned) count(*w.entry);
      dims_.reset(new int64_t[std::max<size_t>(num_dims, 1)]);
    }
    chars_.reset(new char[std::max<size_t>(name_bytes, 1)]);
    next_dim_ = dims_.get();
  }

  // Always a copy (sources are few).
  std::string_view Copy(std::string_view s) {
    std::memcpy(chars_.get() + used_, s.data(), s.size());
    const std::string_view v(chars_.get() + used_, s.size());
    used_ += s.size();
    return v;
  }
  std::string_view Name(std::string_view s) { return views_ ? s : Copy(s); }
  absl::Span<const int64_t> Dims(absl::Span<const int64_t> v) {
    if (views_) return v;
    std::copy(v.begin(), v.end(), next_dim_);
    const absl::Span<const int64_t> span(next_dim_, v.size());
    next_dim_ += v.size();
    return span;
  }

  std::unique_ptr<char[]> ReleaseChars() { return std::move(chars_); }
  std::unique_ptr<int64_t[]> ReleaseDims() { return std::move(dims_); }

 private:
  const bool views_;
  std::unique_ptr<char[]> chars_;
  size_t used_ = 0;
  std::unique_ptr<int64_t[]> dims_;
  int64_t* next_dim_ = nullptr;
};

LoadedWeightsAssembler::LoadedWeightsAssembler(std::shared_ptr<Device> device)
    : impl_(std::make_unique<LoadedWeights::Impl>()) {
  impl_->device = std::move(device);
}

LoadedWeightsAssembler::~LoadedWeightsAssembler() = default;

LoadStats& LoadedWeightsAssembler::stats() { return impl_->stats; }
LoadTimings& LoadedWeightsAssembler::timings() { return impl_->timings; }

void LoadedWeightsAssembler::Assemble(absl::Span<const ResolvedManifest> manifests, bool all_keys,
                                      LoadPlan plan, PlacedStorages placed,
                                      std::shared_ptr<const void> keep) {
  const auto finish_t0 = Clock::now();
  LoadedWeights::Impl& out = *impl_;
  out.host_device = std::move(placed.host_device);
  out.chosen = std::move(plan.chosen_variants);
  const uint64_t total_bytes = plan.total_bytes;
  const bool views = keep != nullptr && !all_keys;
  PresizedCopies names(manifests, plan, views);
  for (const ResolvedManifest& m : manifests) out.sources.push_back(names.Copy(m.source()));
  // First the storages, from the plan's storages and the buffers, which
  // then go; then their keys, from the plan's keys, which then go.
  BuildStorages(*out.device, plan, placed);
  BuildStorageKeys(names, plan);
  BuildWeights(names, manifests.size() > 1, plan);
  BuildRuntimeOwned(names, plan);
  out.names = names.ReleaseChars();
  out.dims = names.ReleaseDims();
  if (views) out.keep = std::move(keep);
  out.stats.weights = out.weights.size();
  out.stats.storages = out.storages.size();
  out.stats.bytes = total_bytes;
  out.timings.finish_s = SecondsSince(finish_t0);
}

void LoadedWeightsAssembler::BuildStorages(const Device& device, LoadPlan& plan,
                                           PlacedStorages& placed) {
  LoadedWeights::Impl& out = *impl_;
  const size_t num_storages = plan.storages.size();
  out.storages.resize(num_storages);
  for (uint32_t i = 0; i < num_storages; ++i) {
    LoadedStorage& s = out.storages[i];
    const bool on_host = plan.residency[i] == Residency::kHost;
    s.nbytes = plan.storages[i].nbytes;
    s.device = on_host ? DeviceKind::kHost : device.kind();
    s.device_index = on_host ? 0 : device.index();
    s.residency = placed.residency[i];
    s.host_accessible =
        on_host || s.residency == Residency::kMappedHost || device.host_accessible();
    s.buffer = std::move(placed.buffers[i]);
    PlacementStats& where = out.stats.placed(s.residency);
    ++where.storages;
    where.bytes += s.nbytes;
  }
  for (uint32_t i : placed.file_mapped) out.storages[i].mapped = true;
  placed = PlacedStorages();
  std::vector<StorageJob>().swap(plan.storages);
}

// Each storage's keys, in first-use order, grouped by storage in one array.
void LoadedWeightsAssembler::BuildStorageKeys(PresizedCopies& names, LoadPlan& plan) {
  LoadedWeights::Impl& out = *impl_;
  const size_t num_storages = out.storages.size();
  std::vector<uint32_t> key_start(num_storages + 1, 0);
  for (const PlannedKey& k : plan.keys) ++key_start[k.storage + 1];
  for (size_t i = 0; i < num_storages; ++i) key_start[i + 1] += key_start[i];
  const size_t num_keys = plan.keys.size();
  out.storage_keys.reset(new std::string_view[std::max<size_t>(num_keys, 1)]);
  out.key_storage.reset(new uint32_t[std::max<size_t>(num_keys, 1)]);
  out.num_storage_keys = num_keys;
  {
    std::vector<uint32_t> fill(key_start.begin(), key_start.end() - 1);
    for (const PlannedKey& k : plan.keys) out.storage_keys[fill[k.storage]++] = names.Name(k.key);
  }
  std::vector<PlannedKey>().swap(plan.keys);
  for (uint32_t i = 0; i < num_storages; ++i) {
    out.storages[i].keys =
        absl::MakeConstSpan(out.storage_keys.get() + key_start[i], key_start[i + 1] - key_start[i]);
    std::fill(out.key_storage.get() + key_start[i], out.key_storage.get() + key_start[i + 1], i);
  }
}

void LoadedWeightsAssembler::BuildWeights(PresizedCopies& names, bool by_source,
                                          const LoadPlan& plan) {
  LoadedWeights::Impl& out = *impl_;
  out.weights.reserve(plan.weights.size());
  // Find(source, fqn) uses the fqn index when there is one manifest.
  if (by_source) out.weight_manifest.reserve(plan.weights.size());
  std::vector<bool> storage_used(out.storages.size(), false);
  for (const PlannedWeight& planned : plan.weights) {
    const WeightEntry& e = *planned.entry;
    const LoadedStorage& storage = out.storages[planned.storage];
    if (storage_used[planned.storage]) ++out.stats.reused;
    storage_used[planned.storage] = true;
    LoadedWeight w{.fqn = names.Name(e.fqn),
                   .storage_key = names.Name(e.storage_key),
                   .source = out.sources[planned.manifest],
                   .dtype = e.dtype,
                   // Checked when planned; at most 16.
                   .element_size = static_cast<uint16_t>(*ElementSize(e.dtype)),
                   .residency = storage.residency,
                   .sizes = names.Dims(e.sizes),
                   .strides = names.Dims(e.strides),
                   .storage_offset = e.storage_offset,
                   .storage = planned.storage,
                   .device = storage.device};
    // storage_offset * element_size <= required_nbytes <= nbytes (G2), so
    // this stays inside the storage for a non-empty view.
    w.data = static_cast<uint8_t*>(storage.buffer.data()) +
             static_cast<uint64_t>(w.storage_offset) * w.element_size;
    out.weights.push_back(w);
    if (by_source) out.weight_manifest.push_back(planned.manifest);
  }
}

void LoadedWeightsAssembler::BuildRuntimeOwned(PresizedCopies& names, const LoadPlan& plan) {
  LoadedWeights::Impl& out = *impl_;
  out.runtime_owned.reserve(plan.runtime_owned.size());
  for (const PlannedRuntimeOwned& o : plan.runtime_owned) {
    const WeightEntry& e = *o.entry;
    out.runtime_owned.push_back(RuntimeOwnedWeight{.fqn = names.Name(e.fqn),
                                                   .storage_key = names.Name(e.storage_key),
                                                   .source = out.sources[o.manifest],
                                                   .dtype = e.dtype,
                                                   .element_size = o.element_size,
                                                   .sizes = names.Dims(e.sizes),
                                                   .strides = names.Dims(e.strides),
                                                   .storage_offset = e.storage_offset,
                                                   .device_type = e.device_type,
                                                   .storage_nbytes = e.storage_nbytes,
                                                   .required_nbytes = o.required_nbytes});
  }
  out.stats.runtime_owned = out.runtime_owned.size();
}

LoadedWeights LoadedWeightsAssembler::Finish(Clock::time_point start,
                                             std::optional<double> first_complete_s) {
  LoadTimings& t = impl_->timings;
  t.total_s = SecondsSince(start);
  t.first_weight_s = first_complete_s.value_or(t.total_s);
  return LoadedWeights(std::move(impl_));
}

}  // namespace ptd::internal
