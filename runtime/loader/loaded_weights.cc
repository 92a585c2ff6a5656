// LoadedWeights: the result of a load, answering from its Impl.
#include "runtime/loader/loaded_weights.h"

#include <utility>

namespace ptd {

LoadedWeights::LoadedWeights(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoadedWeights::LoadedWeights(LoadedWeights&& other) noexcept = default;
// The old Impl is destroyed as a whole, in its declaration order: its
// storages before its devices.
LoadedWeights& LoadedWeights::operator=(LoadedWeights&& other) noexcept = default;
LoadedWeights::~LoadedWeights() = default;

const LoadedWeights::Impl& LoadedWeights::impl() const {
  static const Impl* const kEmpty = new Impl();  // A moved-from result's.
  return impl_ != nullptr ? *impl_ : *kEmpty;
}

const std::vector<LoadedWeight>& LoadedWeights::weights() const { return impl().weights; }
const std::vector<LoadedStorage>& LoadedWeights::storages() const { return impl().storages; }
const std::vector<RuntimeOwnedWeight>& LoadedWeights::runtime_owned() const {
  return impl().runtime_owned;
}
const std::vector<std::optional<size_t>>& LoadedWeights::chosen_variants() const {
  return impl().chosen;
}
const std::shared_ptr<Device>& LoadedWeights::device() const { return impl().device; }
const LoadTimings& LoadedWeights::timings() const { return impl().timings; }
const LoadStats& LoadedWeights::stats() const { return impl().stats; }

const LoadedWeights::Impl::Indexes& LoadedWeights::Impl::BuiltIndexes() const {
  std::call_once(indexes.built, [this] {
    Indexes& x = indexes;
    x.by_fqn.reserve(weights.size());
    for (const LoadedWeight& w : weights) x.by_fqn.insert(&w);  // The first of each fqn.
    if (!weight_manifest.empty()) {
      x.by_source_fqn.reserve(weights.size());
      for (size_t i = 0; i < weights.size(); ++i) {
        x.by_source_fqn.try_emplace(std::make_pair(weight_manifest[i], weights[i].fqn),
                                    static_cast<uint32_t>(i));
      }
    }
    x.by_key.reserve(num_storage_keys);
    for (size_t k = 0; k < num_storage_keys; ++k) x.by_key.insert(&storage_keys[k]);
  });
  return indexes;
}

const LoadedWeight* LoadedWeights::Find(std::string_view fqn) const {
  const auto& by_fqn = impl().BuiltIndexes().by_fqn;
  auto it = by_fqn.find(fqn);
  return it == by_fqn.end() ? nullptr : *it;
}

const LoadedWeight* LoadedWeights::Find(std::string_view source, std::string_view fqn) const {
  const Impl& x = impl();
  for (uint32_t i = 0; i < x.sources.size(); ++i) {
    if (x.sources[i] != source) continue;
    if (x.sources.size() == 1) return Find(fqn);
    const auto& by_source_fqn = x.BuiltIndexes().by_source_fqn;
    auto it = by_source_fqn.find(std::make_pair(i, fqn));
    return it == by_source_fqn.end() ? nullptr : &x.weights[it->second];
  }
  return nullptr;
}

const LoadedStorage* LoadedWeights::FindStorage(std::string_view key) const {
  const Impl& x = impl();
  const auto& by_key = x.BuiltIndexes().by_key;
  auto it = by_key.find(key);
  return it == by_key.end() ? nullptr : &x.storages[x.key_storage[*it - x.storage_keys.get()]];
}

Device& LoadedWeights::DeviceOf(const LoadedStorage& s) const {
  const Impl& x = impl();
  if (s.device == DeviceKind::kHost && x.device->kind() != DeviceKind::kHost && x.host_device) {
    return *x.host_device;
  }
  return *x.device;
}

}  // namespace ptd
