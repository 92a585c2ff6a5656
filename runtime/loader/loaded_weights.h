// What a LoadedWeights holds (ptd/loader.h), private to ptd::loader: the
// assemble stage (assemble.h) fills it, loaded_weights.cc answers from it.
#ifndef PTD_RUNTIME_LOADER_LOADED_WEIGHTS_H_
#define PTD_RUNTIME_LOADER_LOADED_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

#include "ptd/device.h"
#include "ptd/loader.h"

namespace ptd {
namespace internal {

// Hashes and compares what LoadedWeights indexes by a name (a weight by its
// fqn, a storage key by itself) and names against them: each index is a set
// of 8-byte pointers into the result, not of (name, index) pairs.
struct NameOfHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return absl::Hash<std::string_view>{}(s); }
  size_t operator()(const LoadedWeight* w) const { return (*this)(w->fqn); }
  size_t operator()(const std::string_view* k) const { return (*this)(*k); }
};
struct NameOfEq {
  using is_transparent = void;
  static std::string_view Name(std::string_view s) { return s; }
  static std::string_view Name(const LoadedWeight* w) { return w->fqn; }
  static std::string_view Name(const std::string_view* k) { return *k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Name(a) == Name(b);
  }
};

}  // namespace internal

// Declaration order is destruction order, reversed: the devices come first,
// so that every buffer (storages) goes before the devices whose internals
// the buffers' deleters use (a CudaDevice's FreeBlock). Nothing but
// storages may hold a DeviceBuffer, or it too must come after the devices.
// Never moved (LoadedWeights holds it by pointer), so that the views and
// the indexes' once_flag stay put.
struct LoadedWeights::Impl {
  std::shared_ptr<Device> device;
  std::shared_ptr<Device> host_device;  // For CPU weights when `device` is not the host.
  std::vector<LoadedStorage> storages;
  std::vector<LoadedWeight> weights;
  std::vector<RuntimeOwnedWeight> runtime_owned;
  std::vector<std::optional<size_t>> chosen;
  // What the views point into when they are not copies (the bundle).
  std::shared_ptr<const void> keep;
  // Names and dims the views point into: sized once, never reallocated.
  std::unique_ptr<char[]> names;
  std::unique_ptr<int64_t[]> dims;
  std::unique_ptr<std::string_view[]> storage_keys;  // LoadedStorage::keys.
  std::vector<std::string_view> sources;
  std::unique_ptr<uint32_t[]> key_storage;  // Per storage_keys element: its storage.
  size_t num_storage_keys = 0;
  // Per weight, its manifest (parallel to weights; only with several).
  std::vector<uint32_t> weight_manifest;
  // Into weights (first manifest's weight of each fqn) and storage_keys.
  // Built by the first Find or FindStorage, once (a load whose caller looks
  // nothing up, or a few names, does not hash 100,000 of them).
  struct Indexes {
    std::once_flag built;
    absl::flat_hash_set<const LoadedWeight*, internal::NameOfHash, internal::NameOfEq> by_fqn;
    absl::flat_hash_map<std::pair<uint32_t, std::string_view>, uint32_t> by_source_fqn;
    absl::flat_hash_set<const std::string_view*, internal::NameOfHash, internal::NameOfEq> by_key;
  };
  mutable Indexes indexes;
  LoadTimings timings;
  LoadStats stats;

  // The indexes, built on first use. Thread-safe.
  const Indexes& BuiltIndexes() const;
};

}  // namespace ptd

#endif  // PTD_RUNTIME_LOADER_LOADED_WEIGHTS_H_
