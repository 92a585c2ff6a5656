#include "ptd/executorch/named_data_map_source.h"

#include <executorch/runtime/core/freeable_buffer.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "ptd/manifest.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

using ::executorch::runtime::Error;
using ::executorch::runtime::FreeableBuffer;
using ::executorch::runtime::NamedDataMap;
using internal::Sv;

// A key's bytes from get_data(), held while a load reads it in chunks.
struct Held {
  std::mutex mu;
  // Set once, under mu; immutable after (FreeableBuffer has no move
  // assignment, hence optional).
  std::optional<FreeableBuffer> buffer;
  std::atomic<uint64_t> remaining{0};  // Bytes of the key not read yet.
};

class NamedDataMapByteSource final : public ByteSource {
 public:
  NamedDataMapByteSource(const NamedDataMap& map, NamedDataMapSourceOptions options)
      : map_(map), options_(std::move(options)) {}

  std::string name() const override { return options_.name; }

  std::vector<std::string> Keys() const override {
    std::vector<std::string> keys;
    auto n = map_.get_num_keys();
    if (!n.ok()) return keys;
    keys.reserve(*n);
    for (uint32_t i = 0; i < *n; ++i) {
      auto k = map_.get_key(i);
      if (k.ok() && *k != nullptr) keys.emplace_back(*k);
    }
    return keys;
  }

  absl::StatusOr<uint64_t> Size(std::string_view key) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = sizes_.find(Sv(key)); it != sizes_.end()) return it->second;
    }
    auto data = map_.get_data(key);
    if (!data.ok()) return NamedDataMapError(data.error(), options_.name, "get_data", key);
    const uint64_t size = data->size();
    data->Free();
    std::lock_guard<std::mutex> lock(mu_);
    sizes_.try_emplace(std::string(key), size);
    return size;
  }

  absl::Status ReadAt(std::string_view key, uint64_t offset,
                      absl::Span<uint8_t> dst) const override {
    PTD_ASSIGN_OR_RETURN(const uint64_t size, Size(key));
    if (offset > size || dst.size() > size - offset) {
      return absl::OutOfRangeError(absl::StrCat(options_.name, ": read of ", dst.size(),
                                                " bytes at ", offset, " of key '", Sv(key), "' (",
                                                size, " bytes)"));
    }
    if (dst.empty()) return absl::OkStatus();
    if (offset == 0 && dst.size() == size) return ReadWhole(key, dst);
    return ReadChunk(key, size, offset, dst);
  }

 private:
  absl::Status ReadWhole(std::string_view key, absl::Span<uint8_t> dst) const {
    if (options_.use_load_data_into) {
      return NamedDataMapError(map_.load_data_into(key, dst.data(), dst.size()), options_.name,
                               "load_data_into", key);
    }
    auto data = map_.get_data(key);
    if (!data.ok()) return NamedDataMapError(data.error(), options_.name, "get_data", key);
    PTD_RETURN_IF_ERROR(CheckSize(key, data->size(), dst.size()));
    std::memcpy(dst.data(), data->data(), dst.size());
    return absl::OkStatus();
  }

  absl::Status ReadChunk(std::string_view key, uint64_t size, uint64_t offset,
                         absl::Span<uint8_t> dst) const {
    std::shared_ptr<Held> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto [it, inserted] = held_.try_emplace(std::string(key), nullptr);
      if (inserted) {
        it->second = std::make_shared<Held>();
        it->second->remaining = size;
      }
      held = it->second;
    }
    {
      std::lock_guard<std::mutex> lock(held->mu);
      if (!held->buffer) {
        auto data = map_.get_data(key);
        if (!data.ok()) {
          Drop(key, held);
          return NamedDataMapError(data.error(), options_.name, "get_data", key);
        }
        held->buffer.emplace(std::move(*data));
      }
    }
    absl::Status st = CheckSize(key, held->buffer->size(), size);
    if (st.ok()) {
      std::memcpy(dst.data(), static_cast<const uint8_t*>(held->buffer->data()) + offset,
                  dst.size());
    }
    // The last chunk (or a failure) lets the buffer go.
    if (!st.ok() || held->remaining.fetch_sub(dst.size()) == dst.size()) Drop(key, held);
    return st;
  }

  void Drop(std::string_view key, const std::shared_ptr<Held>& held) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(Sv(key));
    if (it != held_.end() && it->second == held) held_.erase(it);
  }

  absl::Status CheckSize(std::string_view key, uint64_t got, uint64_t want) const {
    if (got == want) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(options_.name, ": get_data of key '", Sv(key),
                                            "' gave ", got, " bytes, ", want,
                                            " when it was sized"));
  }

  const NamedDataMap& map_;
  const NamedDataMapSourceOptions options_;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, uint64_t> sizes_;              // Guarded by mu_.
  mutable absl::flat_hash_map<std::string, std::shared_ptr<Held>> held_;  // Guarded by mu_.
};

}  // namespace

absl::Status NamedDataMapError(Error error, const std::string& name, const char* call,
                               std::string_view key) {
  if (error == Error::Ok) return absl::OkStatus();
  const std::string message =
      absl::StrFormat("%s: %s of key '%s' failed: %s (0x%x)", name, call, Sv(key),
                      ::executorch::runtime::to_string(error), static_cast<unsigned>(error));
  switch (error) {
    case Error::NotFound:
      return absl::NotFoundError(message);
    case Error::MemoryAllocationFailed:
      return absl::ResourceExhaustedError(message);
    case Error::InvalidArgument:
      return absl::InvalidArgumentError(message);
    default:
      return absl::DataLossError(message);
  }
}

std::unique_ptr<ByteSource> MakeNamedDataMapByteSource(const NamedDataMap& map,
                                                       NamedDataMapSourceOptions options) {
  return std::make_unique<NamedDataMapByteSource>(map, std::move(options));
}

absl::StatusOr<LoadedWeights> LoadWeightsFromNamedDataMap(
    absl::Span<const uint8_t> manifest, const NamedDataMap& map, std::shared_ptr<Device> device,
    const LoadOptions& options, const NamedDataMapSourceOptions& source_options) {
  const std::unique_ptr<ByteSource> source = MakeNamedDataMapByteSource(map, source_options);
  // Size every key the manifest names first: NotFound is the verifier's X1,
  // but any other failure of the map is the map's error, naming the key.
  // (The sizes are cached for the verification and the load that follow.)
  // Runtime-owned entries' keys are never asked for: the runtime allocates
  // them (SPEC section 2).
  if (auto m = ParseManifest(manifest, kStandaloneManifestSource); m.ok()) {
    for (const WeightEntry& e : m->entries) {
      if (e.runtime_owned()) continue;
      auto size = source->Size(e.storage_key);
      if (!size.ok() && size.status().code() != absl::StatusCode::kNotFound) {
        return size.status();
      }
    }
  }
  // A manifest that does not parse: LoadWeights reports its rule.
  return LoadWeights(manifest, *source, std::move(device), options);
}

}  // namespace ptd
