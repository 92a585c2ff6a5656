#include "ptd/loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ptd/host_device.h"
#include "ptd/scalar_type.h"
#include "ptd/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/placement.h"
#include "runtime/loader/transfer.h"

namespace ptd {

using Clock = std::chrono::steady_clock;
using internal::Sv;

namespace {

constexpr uint64_t kHostPackLimit = uint64_t{256} << 10;
constexpr std::string_view kLibraryConstantPrefix = "_tensor_constant";

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct ManifestRef {
  std::string source;
  const Manifest* manifest;
  // The resolver's weights, parallel to manifest->entries; null when the
  // manifest was not resolved against the loader's container.
  const std::vector<ResolvedWeight>* resolved = nullptr;
};

// The variant library that a library-local constant belongs to: the
// so_blob_key L of one of the manifest's variants when the entry's storage
// key is "cuda_fqn_weight:<device>:L:<fqn>" (the exporter's naming) or its
// fqn is "L:<name>"; nullopt for every other entry (shared by all variants).
std::optional<size_t> LibraryOf(const WeightEntry& e, const Manifest& m) {
  std::optional<size_t> best;
  size_t best_len = 0;
  const std::string_view key = e.storage_key;
  for (size_t v = 0; v < m.variants.size(); ++v) {
    const std::string& lib = m.variants[v].so_blob_key;
    bool match = false;
    if (absl::StartsWith(Sv(e.fqn), Sv(kLibraryConstantPrefix))) {
      for (std::string_view dev : {"cuda:", "cpu:"}) {
        const std::string prefix = absl::StrCat(Sv(kCudaWeightKeyPrefix), Sv(dev), lib, ":");
        match |= absl::StartsWith(Sv(key), prefix);
      }
    }
    match |= absl::StartsWith(Sv(e.fqn), absl::StrCat(lib, ":"));
    if (match && lib.size() >= best_len) {
      best = v;
      best_len = lib.size();
    }
  }
  return best;
}

}  // namespace

// Builds LoadedWeights (its constructor and fields are private).
class LoaderAccess {
 public:
  static absl::StatusOr<LoadedWeights> Load(absl::Span<const ManifestRef> manifests,
                                            bool all_keys, const ByteSource& source,
                                            const Container* container,
                                            std::shared_ptr<Device> device,
                                            const LoadOptions& options,
                                            Clock::time_point start, double verify_s,
                                            std::shared_ptr<const void> keep = nullptr);
  static LoadTimings& MutableTimings(LoadedWeights& w) { return w.timings_; }
};

namespace {

// Storage requests, deduplicated per (segment or key, destination). Keys
// are views into strings that outlive the load (the manifests, the source's
// key list, the container).
//
// With the container behind the source, keys are found through its entries
// (the resolver's, or one index lookup) and deduplicated in arrays indexed
// by entry and by segment: no hashing per weight. Otherwise through the
// source's Locate and Size, with hash maps.
class StoragePlanner {
 public:
  StoragePlanner(const ByteSource& source, const Container* container)
      : source_(source), container_(container) {}

  // The storage for `key` in destination group `group`; adds it on first use.
  absl::StatusOr<uint32_t> Add(std::string_view key, int group) {
    if (container_ != nullptr) {
      if (const NamedDataEntry* e = container_->Find(key)) return Add(*e, group);
    }
    auto& by_key = by_key_[group];
    if (auto it = by_key.find(key); it != by_key.end()) return it->second;
    const std::optional<ByteSource::Location> loc = source_.Locate(key);
    uint32_t index = static_cast<uint32_t>(jobs.size());
    bool fresh = true;
    if (loc) {
      auto [it, inserted] = by_segment_[group].try_emplace(loc->segment, index);
      index = it->second;
      fresh = inserted;
    }
    if (fresh) {
      PTD_ASSIGN_OR_RETURN(const uint64_t size, source_.Size(key));
      jobs.push_back(internal::StorageJob{.key = key, .nbytes = size, .location = loc});
      groups.push_back(group);
    }
    key_refs.push_back({index, key});
    by_key.emplace(key, index);
    return index;
  }

  // The storage behind `named`, an entry of the container given at
  // construction (REQUIRES: one was).
  absl::StatusOr<uint32_t> Add(const NamedDataEntry& named, int group) {
    const std::vector<Segment>& segments = container_->segments();
    if (named.segment_index >= segments.size() || !segments[named.segment_index].in_bounds) {
      // Not readable; the source's own lookup reports why.
      PTD_RETURN_IF_ERROR(source_.Size(named.key).status());
      return absl::NotFoundError(
          absl::StrCat(source_.name(), ": no readable key '", Sv(named.key), "'"));
    }
    std::vector<uint32_t>& by_entry = by_entry_[group];
    std::vector<uint32_t>& by_segment = by_segment_index_[group];
    if (by_entry.empty()) {
      by_entry.assign(container_->named_data().size(), kNone);
      by_segment.assign(segments.size(), kNone);
    }
    const size_t entry = static_cast<size_t>(&named - container_->named_data().data());
    if (by_entry[entry] != kNone) return by_entry[entry];
    uint32_t& index = by_segment[named.segment_index];
    if (index == kNone) {
      index = static_cast<uint32_t>(jobs.size());
      jobs.push_back(internal::StorageJob{
          .key = named.key,
          .nbytes = segments[named.segment_index].size,
          .location = ByteSource::Location{
              .segment = named.segment_index,
              .offset = container_->SegmentFileOffset(named.segment_index)}});
      groups.push_back(group);
    }
    key_refs.push_back({index, named.key});
    by_entry[entry] = index;
    return index;
  }

  void Reserve(size_t n) {
    jobs.reserve(n);
    groups.reserve(n);
    key_refs.reserve(n);
  }

  // Frees everything planned (once the result holds what it needs).
  void Release() {
    ReleaseAllButKeys();
    std::vector<KeyRef>().swap(key_refs);
  }
  // Frees everything planned but the key list.
  void ReleaseAllButKeys() {
    std::vector<internal::StorageJob>().swap(jobs);
    std::vector<int>().swap(groups);
    for (int g = 0; g < 2; ++g) {
      by_key_[g] = {};
      by_segment_[g] = {};
      std::vector<uint32_t>().swap(by_entry_[g]);
      std::vector<uint32_t>().swap(by_segment_index_[g]);
    }
  }

  struct KeyRef {
    uint32_t job;
    std::string_view key;
  };
  std::vector<internal::StorageJob> jobs;
  std::vector<int> groups;        // Per job: 0 device, 1 host.
  std::vector<KeyRef> key_refs;   // Every distinct (key, group), in first-use order.

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  const ByteSource& source_;
  const Container* container_;
  absl::flat_hash_map<std::string_view, uint32_t> by_key_[2];
  absl::flat_hash_map<uint64_t, uint32_t> by_segment_[2];
  std::vector<uint32_t> by_entry_[2];          // Container entry -> job.
  std::vector<uint32_t> by_segment_index_[2];  // Segment -> job.
};

// A runtime-owned entry, listed rather than loaded.
struct Owned {
  const WeightEntry* entry;
  uint32_t manifest;
  uint32_t element_size;
};

// A weight chosen for loading.
// 16 bytes a weight, planned before the load and read after it: the
// element size comes from the entry's dtype again, which planning checked.
struct Selected {
  const WeightEntry* entry;
  uint32_t storage;
  uint32_t manifest : 31;
  uint32_t group : 1;  // 1: a CPU weight on a device that is not the host.
};
static_assert(sizeof(Selected) == 16);
static_assert(sizeof(void*) != 8 || sizeof(LoadedWeight) == 112,
              "LoadedWeight's fields are ordered to leave no padding");

// Copies strings into one preallocated buffer and hands out views of them.
class NameBuffer {
 public:
  explicit NameBuffer(size_t bytes) : data_(new char[std::max<size_t>(bytes, 1)]) {}
  std::string_view Add(std::string_view s) {
    std::memcpy(data_.get() + used_, s.data(), s.size());
    const std::string_view v(data_.get() + used_, s.size());
    used_ += s.size();
    return v;
  }
  std::unique_ptr<char[]> Release() { return std::move(data_); }

 private:
  std::unique_ptr<char[]> data_;
  size_t used_ = 0;
};

// Padding between two mapped storages that one mapping may span (it is
// mapped and populated with them; a subset load of scattered weights gets
// several mappings instead of one over the whole file).
constexpr uint64_t kMapMaxGapBytes = uint64_t{1} << 20;

// LoadOptions::map_file for one destination group: the storages of `which`
// that the source can map (located, non-empty, at a kHostAlignment
// multiple) become views of private mappings, one per run of neighbours
// in the file; they leave `which`, which keeps the storages still to be
// allocated and read. A source that cannot map leaves everything to read.
absl::Status MapStorages(const ByteSource& source, size_t threads,
                         std::vector<internal::StorageJob>& jobs,
                         std::vector<uint32_t>* which, std::vector<DeviceBuffer>* buffers,
                         std::vector<uint32_t>* mapped, LoadStats* stats) {
  std::vector<uint32_t> candidates, rest;
  for (uint32_t s : *which) {
    const internal::StorageJob& j = jobs[s];
    const bool mappable = j.location && j.nbytes > 0 && j.location->offset % kHostAlignment == 0;
    (mappable ? candidates : rest).push_back(s);
  }
  if (candidates.empty()) return absl::OkStatus();
  std::stable_sort(candidates.begin(), candidates.end(), [&](uint32_t a, uint32_t b) {
    return jobs[a].location->offset < jobs[b].location->offset;
  });
  for (size_t first = 0; first < candidates.size();) {
    const uint64_t begin = jobs[candidates[first]].location->offset;
    uint64_t end = begin + jobs[candidates[first]].nbytes;
    size_t last = first + 1;
    for (; last < candidates.size(); ++last) {
      const internal::StorageJob& j = jobs[candidates[last]];
      if (j.location->offset > end + kMapMaxGapBytes) break;
      end = std::max(end, j.location->offset + j.nbytes);
    }
    auto mapping = source.MapLocated(begin, end - begin, threads);
    if (!mapping.ok()) {
      if (absl::IsUnimplemented(mapping.status()) && first == 0) {
        return absl::OkStatus();  // This source reads; so does the load.
      }
      const internal::StorageJob& j = jobs[candidates[first]];
      return absl::Status(
          mapping.status().code(),
          absl::StrCat("storage '", Sv(j.key), "' (", j.nbytes, " bytes",
                       last - first > 1
                           ? absl::StrCat(", mapped with ", last - first - 1,
                                          " neighbouring storage(s)")
                           : std::string(),
                       "): map: ", mapping.status().message()));
    }
    const std::shared_ptr<void> block = *mapping;
    ++stats->mappings;
    for (size_t k = first; k < last; ++k) {
      const uint32_t s = candidates[k];
      uint8_t* data = mapping->get() + (jobs[s].location->offset - begin);
      (*buffers)[s] = DeviceBuffer(block, data, static_cast<size_t>(jobs[s].nbytes));
      jobs[s].dest = data;
      mapped->push_back(s);
      ++stats->mapped;
      stats->mapped_bytes += jobs[s].nbytes;
    }
    first = last;
  }
  *which = std::move(rest);
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<LoadedWeights> LoaderAccess::Load(absl::Span<const ManifestRef> manifests,
                                                 bool all_keys, const ByteSource& source,
                                                 const Container* container,
                                                 std::shared_ptr<Device> device,
                                                 const LoadOptions& options,
                                                 Clock::time_point start, double verify_s,
                                                 std::shared_ptr<const void> keep) {
  if (device == nullptr) return absl::InvalidArgumentError("LoadWeights: no device");
  if (all_keys && !options.fqns.empty()) {
    // Weights are named by a manifest; loading every key instead would be a
    // silent surprise (and may allocate what the caller did not ask for).
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadOptions::fqns names weight '", options.fqns.front(),
        "' but there is no manifest (weights are named by --manifest or --pte)"));
  }
  // CPU weights go to host memory: the device itself when it is the host.
  const bool device_is_host = device->kind() == DeviceKind::kHost;
  if (device_is_host && (options.device_budget_bytes || !options.host_fqns.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.device_budget_bytes ? "LoadOptions::device_budget_bytes"
                                    : "LoadOptions::host_fqns",
        " places storages in host memory mapped for a GPU; ", device->name(),
        " is the host (every storage is in host memory already)"));
  }
  LoadedWeights out;
  out.device_ = device;
  out.timings_.verify_s = verify_s;
  const auto plan_t0 = Clock::now();

  StoragePlanner planner(source, container);
  std::vector<std::string> all;  // The source's keys, without a manifest.
  std::vector<Selected> selected;
  std::vector<Owned> owned;
  if (all_keys) {
    all = source.Keys();
    planner.Reserve(all.size());
    for (const std::string& key : all) PTD_RETURN_IF_ERROR(planner.Add(key, 0).status());
  } else {
    // Variants: the capability decides; a single untargeted variant wins.
    const std::optional<uint32_t> sm = options.sm ? options.sm : device->compute_capability();
    const absl::flat_hash_set<std::string_view> wanted(options.fqns.begin(),
                                                       options.fqns.end());
    absl::flat_hash_set<std::string_view> found;
    absl::flat_hash_map<std::string_view, std::string> skipped;  // fqn -> why.
    for (uint32_t mi = 0; mi < manifests.size(); ++mi) {
      const ManifestRef& m = manifests[mi];
      std::optional<size_t> chosen;
      const auto& variants = m.manifest->variants;
      if (sm) {
        auto c = SelectVariant(variants, *sm);
        if (!c.ok()) {
          return absl::Status(c.status().code(),
                              absl::StrCat("manifest ", m.source, ": ", c.status().message()));
        }
        chosen = c->index;
      } else if (variants.size() == 1 && variants[0].target_sm == 0) {
        chosen = 0;
      }
      out.chosen_.push_back(chosen);
      const bool filter_constants = chosen && variants.size() > 1;
      selected.reserve(selected.size() + m.manifest->entries.size());
      planner.Reserve(selected.capacity());
      const std::vector<ResolvedWeight>* resolved =
          container != nullptr && m.resolved != nullptr &&
                  m.resolved->size() == m.manifest->entries.size()
              ? m.resolved
              : nullptr;
      for (size_t ei = 0; ei < m.manifest->entries.size(); ++ei) {
        const WeightEntry& e = m.manifest->entries[ei];
        if (e.runtime_owned()) {
          // Never planned: no storage lookup, no read, no allocation.
          if (wanted.contains(e.fqn)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "weight '", Sv(e.fqn), "' is runtime-owned (", Sv(kRuntimeOwnedPrefix),
                "*): it has no stored bytes to load; the runtime allocates it"));
          }
          const auto elem = ElementSize(e.dtype);
          if (!elem) {
            return absl::InvalidArgumentError(
                absl::StrCat("weight '", Sv(e.fqn), "': unknown dtype ", e.dtype, " (M5)"));
          }
          if (wanted.empty()) owned.push_back(Owned{&e, mi, *elem});
          continue;
        }
        if (!wanted.empty() && !wanted.contains(e.fqn)) continue;
        if (filter_constants) {
          const std::optional<size_t> lib = LibraryOf(e, *m.manifest);
          if (lib && variants[*lib].so_blob_key != variants[*chosen].so_blob_key) {
            skipped.try_emplace(e.fqn, absl::StrCat("a constant of library '",
                                                    variants[*lib].so_blob_key,
                                                    "', not of the chosen variant's '",
                                                    variants[*chosen].so_blob_key, "'"));
            continue;
          }
        }
        if (!wanted.empty()) found.insert(e.fqn);
        const int group = (e.device_type == 0 && !device_is_host) ? 1 : 0;
        const NamedDataEntry* named = resolved ? (*resolved)[ei].named : nullptr;
        PTD_ASSIGN_OR_RETURN(const uint32_t s, named ? planner.Add(*named, group)
                                                     : planner.Add(e.storage_key, group));
        const auto elem = ElementSize(e.dtype);
        if (!elem) {
          return absl::InvalidArgumentError(
              absl::StrCat("weight '", Sv(e.fqn), "': unknown dtype ", e.dtype, " (M5)"));
        }
        selected.push_back(Selected{
            .entry = &e, .storage = s, .manifest = mi, .group = static_cast<uint32_t>(group)});
      }
    }
    for (const std::string& fqn : options.fqns) {
      if (found.contains(fqn)) continue;
      if (auto it = skipped.find(fqn); it != skipped.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("weight '", fqn, "' is ", it->second));
      }
      return absl::NotFoundError(absl::StrCat("weight '", fqn, "' is in no manifest"));
    }
  }
  std::vector<internal::StorageJob>& jobs = planner.jobs;
  // Destinations: 0 the device, 1 host memory (CPU weights on a device that
  // is not the host), 2 host memory mapped for the device.
  std::vector<uint32_t> which[3];
  const size_t num_cpu = static_cast<size_t>(
      std::count(planner.groups.begin(), planner.groups.end(), 1));
  which[0].reserve(jobs.size() - num_cpu);
  which[1].reserve(num_cpu);
  uint64_t total_bytes = 0;
  for (uint32_t i = 0; i < jobs.size(); ++i) {
    which[planner.groups[i]].push_back(i);
    total_bytes += jobs[i].nbytes;
  }
  // Placement, before anything is mapped or allocated: the device's
  // storages in manifest order (the planner's: first use), those of a
  // weight (or, without a manifest, a key) that host_fqns names first to
  // mapped memory.
  std::vector<bool> on_mapped(jobs.size(), false);
  if (options.device_budget_bytes || !options.host_fqns.empty()) {
    std::vector<bool> host_first(jobs.size(), false);
    if (!options.host_fqns.empty()) {
      if (all_keys) {
        for (const StoragePlanner::KeyRef& k : planner.key_refs) {
          if (internal::MatchesAny(options.host_fqns, k.key)) host_first[k.job] = true;
        }
      } else {
        for (const Selected& w : selected) {
          if (w.group == 0 && !host_first[w.storage] &&
              internal::MatchesAny(options.host_fqns, w.entry->fqn)) {
            host_first[w.storage] = true;
          }
        }
      }
    }
    std::vector<uint64_t> sizes;
    std::vector<bool> first;
    sizes.reserve(which[0].size());
    first.reserve(which[0].size());
    for (uint32_t s : which[0]) {
      sizes.push_back(jobs[s].nbytes);
      first.push_back(host_first[s]);
    }
    const internal::Placement placement =
        internal::PlaceStorages(sizes, first, options.device_budget_bytes);
    if (options.device_budget_bytes || placement.mapped_storages > 0) {
      auto info = device->MemoryInfo();
      if (!info.ok()) {
        return absl::Status(info.status().code(),
                            absl::StrCat("placing storages by ",
                                         options.device_budget_bytes ? "a device budget"
                                                                     : "host_fqns",
                                         " on ", device->name(), ": ", info.status().message()));
      }
      PTD_RETURN_IF_ERROR(internal::CheckPlacement(placement, options.device_budget_bytes,
                                                   *info, device->name()));
    }
    std::vector<uint32_t> on_device;
    on_device.reserve(placement.device_storages);
    which[2].reserve(placement.mapped_storages);
    for (size_t k = 0; k < which[0].size(); ++k) {
      const uint32_t s = which[0][k];
      on_mapped[s] = placement.mapped[k];
      (placement.mapped[k] ? which[2] : on_device).push_back(s);
    }
    which[0] = std::move(on_device);
  }
  out.timings_.plan_s = Since(plan_t0);

  std::vector<DeviceBuffer> buffers(jobs.size());
  std::vector<uint32_t> mapped;  // Storages that need no read.
  if (options.map_file) {
    const auto map_t0 = Clock::now();
    for (int g = 0; g < 2; ++g) {
      if (g == 0 && !(device_is_host && device->host_accessible())) continue;
      PTD_RETURN_IF_ERROR(
          MapStorages(source, std::max<size_t>(1, options.threads), jobs, &which[g], &buffers,
                      &mapped, &out.stats_));
    }
    out.timings_.map_s = Since(map_t0);
  }

  // One AllocateMany per device.
  const auto alloc_t0 = Clock::now();
  if (!which[1].empty() || std::find_if(mapped.begin(), mapped.end(), [&](uint32_t s) {
                             return planner.groups[s] == 1;
                           }) != mapped.end()) {
    out.host_device_ = std::make_shared<HostDevice>();
  }
  for (int g = 0; g < 3; ++g) {
    if (which[g].empty()) continue;
    Device& dev = g == 1 ? *out.host_device_ : *device;
    // Buffers in file order (the unlocated after, as planned): the pieces of
    // a packed read (PlanReads, in file order) then lie back to back in the
    // arena as in the file, so that a host device reads straight into them
    // and a GPU copies a staging slot with one cudaMemcpyAsync, whatever
    // the order in which the manifest names the storages.
    std::stable_sort(which[g].begin(), which[g].end(), [&](uint32_t a, uint32_t b) {
      const auto& la = jobs[a].location;
      const auto& lb = jobs[b].location;
      if (!la || !lb) return la.has_value() && !lb.has_value();
      return la->offset < lb->offset;
    });
    std::vector<size_t> sizes;
    sizes.reserve(which[g].size());
    for (uint32_t s : which[g]) sizes.push_back(static_cast<size_t>(jobs[s].nbytes));
    auto got = g == 2 ? dev.AllocateMappedMany(sizes) : dev.AllocateMany(sizes);
    ++out.stats_.allocations;
    if (!got.ok()) {
      std::string what = absl::StrCat(which[g].size(), " storages");
      size_t index = 0;
      const auto payload = got.status().GetPayload(kAllocateManyIndexPayload);
      if (payload && absl::SimpleAtoi(std::string(*payload), &index) &&
          index < which[g].size()) {
        const internal::StorageJob& j = jobs[which[g][index]];
        what = absl::StrCat("storage '", Sv(j.key), "' (", j.nbytes, " bytes)");
      }
      return absl::Status(got.status().code(),
                          absl::StrCat(what, ": allocate ",
                                       g == 2 ? "mapped host memory for " : "on ", dev.name(),
                                       ": ", got.status().message()));
    }
    for (size_t k = 0; k < which[g].size(); ++k) {
      const uint32_t s = which[g][k];
      buffers[s] = std::move((*got)[k]);
      jobs[s].dest = static_cast<uint8_t*>(buffers[s].data());
    }
  }
  out.timings_.allocate_s = Since(alloc_t0);

  // Reads: the device's group first (staged or direct), then CPU weights.
  const auto read_t0 = Clock::now();
  {
    internal::Transfer transfer(source, &jobs, options, start, total_bytes);
    absl::Status st = transfer.CompleteMapped(mapped);
    if (st.ok() && !which[0].empty()) {
      if (device->host_accessible()) {
        const auto plan = internal::PlanReads(
            jobs, which[0], options.max_read_bytes,
            std::min<uint64_t>(kHostPackLimit, options.max_read_bytes), options.max_gap_bytes);
        st = transfer.RunDirect(*device, plan);
      } else {
        const uint64_t slot = std::max<uint64_t>(1, options.ring_slot_bytes);
        const auto plan =
            internal::PlanReads(jobs, which[0], slot, slot, options.max_gap_bytes);
        st = transfer.RunStaged(*device, plan);
      }
    }
    if (st.ok() && !which[2].empty()) {
      // Mapped host memory: straight into it, as into host memory.
      const auto plan = internal::PlanReads(
          jobs, which[2], options.max_read_bytes,
          std::min<uint64_t>(kHostPackLimit, options.max_read_bytes), options.max_gap_bytes);
      st = transfer.RunDirect(*device, plan);
    }
    if (st.ok() && !which[1].empty()) {
      const auto plan = internal::PlanReads(
          jobs, which[1], options.max_read_bytes,
          std::min<uint64_t>(kHostPackLimit, options.max_read_bytes), options.max_gap_bytes);
      st = transfer.RunDirect(*out.host_device_, plan);
    }
    // On error, `buffers` and the result go here: everything allocated is freed.
    PTD_RETURN_IF_ERROR(st);
    out.timings_.read_s = Since(read_t0);
    transfer.AddTo(&out.stats_, &out.timings_);
  }
  const auto finish_t0 = Clock::now();

  // The result's names and dims: views into the manifests and the
  // container when `keep` holds them (the keys of a load without a manifest
  // come from the source's list, so they are always copied), else copies,
  // each kind in one buffer. Sources are few and always copied.
  const bool views = keep != nullptr && !all_keys;
  size_t name_bytes = 0, num_dims = 0;
  for (const ManifestRef& m : manifests) name_bytes += m.source.size();
  if (!views) {
    for (const StoragePlanner::KeyRef& k : planner.key_refs) name_bytes += k.key.size();
    for (const Selected& w : selected) {
      name_bytes += w.entry->fqn.size() + w.entry->storage_key.size();
      num_dims += w.entry->sizes.size() + w.entry->strides.size();
    }
    for (const Owned& w : owned) {
      name_bytes += w.entry->fqn.size() + w.entry->storage_key.size();
      num_dims += w.entry->sizes.size() + w.entry->strides.size();
    }
    out.dims_.reset(new int64_t[std::max<size_t>(num_dims, 1)]);
  }
  NameBuffer names(name_bytes);
  const auto name = [&](std::string_view s) { return views ? s : names.Add(s); };
  for (const ManifestRef& m : manifests) out.sources_.push_back(names.Add(m.source));
  // The result's tables are built as the plan's are freed, so that few of
  // either are alive at once (at 65,536 storages the plan and the tables
  // are each some 10 MB): first the storages, from the jobs and buffers,
  // which then go; then their keys, from the key list, which then goes.
  const size_t num_storages = jobs.size();
  out.storages_.resize(num_storages);
  for (uint32_t i = 0; i < num_storages; ++i) {
    LoadedStorage& s = out.storages_[i];
    s.nbytes = jobs[i].nbytes;
    const bool host_group = planner.groups[i] == 1;
    s.device = host_group ? DeviceKind::kHost : device->kind();
    s.residency = host_group || device_is_host ? Residency::kHost
                  : on_mapped[i]               ? Residency::kMappedHost
                                               : Residency::kDevice;
    s.host_accessible = host_group || on_mapped[i] || device->host_accessible();
    s.buffer = std::move(buffers[i]);
    PlacementStats& placed = s.residency == Residency::kDevice       ? out.stats_.placed_device
                             : s.residency == Residency::kMappedHost ? out.stats_.placed_mapped_host
                                                                     : out.stats_.placed_host;
    ++placed.storages;
    placed.bytes += s.nbytes;
  }
  for (uint32_t i : mapped) out.storages_[i].mapped = true;
  std::vector<DeviceBuffer>().swap(buffers);
  std::vector<uint32_t>().swap(mapped);
  planner.ReleaseAllButKeys();
  // Each storage's keys, in first-use order, grouped by storage in one array.
  {
    std::vector<uint32_t> key_start(num_storages + 1, 0);
    for (const StoragePlanner::KeyRef& k : planner.key_refs) ++key_start[k.job + 1];
    for (size_t i = 0; i < num_storages; ++i) key_start[i + 1] += key_start[i];
    const size_t num_keys = planner.key_refs.size();
    out.storage_keys_.reset(new std::string_view[std::max<size_t>(num_keys, 1)]);
    out.key_storage_.reset(new uint32_t[std::max<size_t>(num_keys, 1)]);
    out.num_storage_keys_ = num_keys;
    {
      std::vector<uint32_t> fill(key_start.begin(), key_start.end() - 1);
      for (const StoragePlanner::KeyRef& k : planner.key_refs) {
        out.storage_keys_[fill[k.job]++] = name(k.key);
      }
    }
    planner.Release();
    for (uint32_t i = 0; i < num_storages; ++i) {
      out.storages_[i].keys = absl::MakeConstSpan(out.storage_keys_.get() + key_start[i],
                                                  key_start[i + 1] - key_start[i]);
      std::fill(out.key_storage_.get() + key_start[i], out.key_storage_.get() + key_start[i + 1],
                i);
    }
  }
  out.weights_.reserve(selected.size());
  // Find(source, fqn) uses the fqn index when there is one manifest.
  const bool by_source = manifests.size() > 1;
  if (by_source) out.weight_manifest_.reserve(selected.size());
  int64_t* dims = out.dims_.get();
  const auto copy_dims = [&](absl::Span<const int64_t> v) {
    if (views) return v;
    std::copy(v.begin(), v.end(), dims);
    const absl::Span<const int64_t> span(dims, v.size());
    dims += v.size();
    return span;
  };
  std::vector<bool> storage_used(out.storages_.size(), false);
  for (const Selected& sel : selected) {
    const WeightEntry& e = *sel.entry;
    if (storage_used[sel.storage]) ++out.stats_.reused;
    storage_used[sel.storage] = true;
    LoadedWeight w{.fqn = name(e.fqn),
                   .storage_key = name(e.storage_key),
                   .source = out.sources_[sel.manifest],
                   .dtype = e.dtype,
                   // Checked when planned; at most 16.
                   .element_size = static_cast<uint16_t>(*ElementSize(e.dtype)),
                   .sizes = copy_dims(e.sizes),
                   .strides = copy_dims(e.strides),
                   .storage_offset = e.storage_offset,
                   .storage = sel.storage,
                   .device = sel.group == 1 ? DeviceKind::kHost : device->kind()};
    // storage_offset * element_size <= required_nbytes <= nbytes (G2), so
    // this stays inside the storage for a non-empty view.
    w.residency = out.storages_[w.storage].residency;
    w.data = static_cast<uint8_t*>(out.storages_[w.storage].buffer.data()) +
             static_cast<uint64_t>(w.storage_offset) * w.element_size;
    out.weights_.push_back(w);
    if (by_source) out.weight_manifest_.push_back(sel.manifest);
  }
  out.runtime_owned_.reserve(owned.size());
  for (const Owned& o : owned) {
    const WeightEntry& e = *o.entry;
    RuntimeOwnedWeight r{.fqn = name(e.fqn),
                         .storage_key = name(e.storage_key),
                         .source = out.sources_[o.manifest],
                         .dtype = e.dtype,
                         .element_size = o.element_size,
                         .sizes = copy_dims(e.sizes),
                         .strides = copy_dims(e.strides),
                         .storage_offset = e.storage_offset,
                         .device_type = e.device_type,
                         .storage_nbytes = e.storage_nbytes};
    // Verified before the load (G1, G2): the span is computable.
    const GeometryResult g = ComputeExtent(ViewSpec{.element_size = r.element_size,
                                                    .storage_offset = r.storage_offset,
                                                    .sizes = r.sizes,
                                                    .strides = r.strides});
    if (!g.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight '", Sv(e.fqn), "': view span arithmetic fails: ", g.detail, " (G1)"));
    }
    r.required_nbytes = g.extent.required_nbytes;
    out.runtime_owned_.push_back(r);
  }
  out.stats_.runtime_owned = out.runtime_owned_.size();
  out.names_ = names.Release();
  if (views) out.keep_ = std::move(keep);
  out.stats_.weights = out.weights_.size();
  out.stats_.storages = out.storages_.size();
  out.stats_.bytes = total_bytes;
  out.timings_.finish_s = Since(finish_t0);
  out.timings_.total_s = Since(start);
  if (out.timings_.first_weight_s == 0) out.timings_.first_weight_s = out.timings_.total_s;
  return out;
}

const LoadedWeights::Indexes& LoadedWeights::indexes() const {
  std::call_once(indexes_->built, [this] {
    Indexes& x = *indexes_;
    x.by_fqn.reserve(weights_.size());
    for (const LoadedWeight& w : weights_) x.by_fqn.insert(&w);  // The first of each fqn.
    if (!weight_manifest_.empty()) {
      x.by_source_fqn.reserve(weights_.size());
      for (size_t i = 0; i < weights_.size(); ++i) {
        x.by_source_fqn.try_emplace(std::make_pair(weight_manifest_[i], weights_[i].fqn),
                                    static_cast<uint32_t>(i));
      }
    }
    x.by_key.reserve(num_storage_keys_);
    for (size_t k = 0; k < num_storage_keys_; ++k) x.by_key.insert(&storage_keys_[k]);
  });
  return *indexes_;
}

const LoadedWeight* LoadedWeights::Find(std::string_view fqn) const {
  const auto& by_fqn = indexes().by_fqn;
  auto it = by_fqn.find(fqn);
  return it == by_fqn.end() ? nullptr : *it;
}

const LoadedWeight* LoadedWeights::Find(std::string_view source, std::string_view fqn) const {
  for (uint32_t i = 0; i < sources_.size(); ++i) {
    if (sources_[i] != source) continue;
    if (sources_.size() == 1) return Find(fqn);
    const auto& by_source_fqn = indexes().by_source_fqn;
    auto it = by_source_fqn.find(std::make_pair(i, fqn));
    return it == by_source_fqn.end() ? nullptr : &weights_[it->second];
  }
  return nullptr;
}

const LoadedStorage* LoadedWeights::FindStorage(std::string_view key) const {
  const auto& by_key = indexes().by_key;
  auto it = by_key.find(key);
  return it == by_key.end() ? nullptr : &storages_[key_storage_[*it - storage_keys_.get()]];
}

Device& LoadedWeights::DeviceOf(const LoadedStorage& s) const {
  if (s.device == DeviceKind::kHost && device_->kind() != DeviceKind::kHost && host_device_) {
    return *host_device_;
  }
  return *device_;
}

namespace {

// LoadWeights of a bundle; the result's views point into the bundle when
// `keep` holds it.
absl::StatusOr<LoadedWeights> LoadBundle(const WeightBundle& bundle,
                                         std::shared_ptr<Device> device,
                                         const LoadOptions& options,
                                         std::shared_ptr<const void> keep) {
  const auto start = Clock::now();
  const Container* c = bundle.container();
  if (c == nullptr || bundle.io_error()) {
    return absl::FailedPreconditionError("LoadWeights: the bundle has no readable container");
  }
  if (bundle.weights()) {
    for (const ResolvedManifest& m : bundle.weights()->manifests()) {
      for (const ResolvedWeight& w : m.weights) {
        if (!w.ok) {
          return absl::FailedPreconditionError(absl::StrCat(
              "LoadWeights: weight '", Sv(w.entry->fqn), "' (", m.source,
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
        return absl::DataLossError(absl::StrCat(c->path(), ": the file is ",
                                                (*reopened)->size(), " bytes now, ",
                                                c->source().size(), " when verified"));
      }
      data = std::move(*reopened);
    }
    // Else an in-memory source (no path to reopen): read it as it is.
  }
  const std::unique_ptr<ByteSource> source = MakeContainerByteSource(*c, std::move(data));
  std::vector<ManifestRef> refs;
  for (const SourcedManifest& m : bundle.manifests()) {
    ManifestRef ref{m.source, &m.manifest};
    if (bundle.weights()) {
      for (const ResolvedManifest& r : bundle.weights()->manifests()) {
        if (r.manifest == &m.manifest) ref.resolved = &r.weights;
      }
    }
    refs.push_back(std::move(ref));
  }
  return LoaderAccess::Load(refs, refs.empty(), *source, c, std::move(device), options, start,
                            0, std::move(keep));
}

}  // namespace

absl::StatusOr<LoadedWeights> LoadWeights(const WeightBundle& bundle,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  return LoadBundle(bundle, std::move(device), options, nullptr);
}

absl::StatusOr<LoadedWeights> LoadWeights(std::shared_ptr<const WeightBundle> bundle,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  if (bundle == nullptr) return absl::InvalidArgumentError("LoadWeights: no bundle");
  const WeightBundle& b = *bundle;
  return LoadBundle(b, std::move(device), options, std::move(bundle));
}

absl::StatusOr<LoadedWeights> LoadWeights(const BundlePaths& paths,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  const auto start = Clock::now();
  BundlePaths p = paths;
  p.use_mmap = false;
  PTD_ASSIGN_OR_RETURN(WeightBundle bundle, WeightBundle::Open(p));
  const double verify_s = Since(start);
  PTD_ASSIGN_OR_RETURN(LoadedWeights w, LoadWeights(bundle, std::move(device), options));
  // Account the verification to this load.
  LoadTimings& t = LoaderAccess::MutableTimings(w);
  t.verify_s = verify_s;
  t.total_s = Since(start);
  t.first_weight_s += verify_s;
  return w;
}

absl::StatusOr<LoadedWeights> LoadWeights(absl::Span<const uint8_t> manifest,
                                          const ByteSource& source,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  const auto start = Clock::now();
  PTD_ASSIGN_OR_RETURN(const Manifest m, ParseManifest(manifest, "manifest"));
  const ManifestInput input{"manifest", &m};
  Report report;
  (void)WeightSet::ResolveSizes(
      absl::MakeConstSpan(&input, 1),
      [&](std::string_view key) -> std::optional<uint64_t> {
        auto size = source.Size(key);
        if (!size.ok()) return std::nullopt;
        return *size;
      },
      &report);
  if (!report.ok()) {
    const absl::Status first = report.FirstError();
    return absl::Status(first.code(), absl::StrCat(source.name(), ": ", first.message()));
  }
  const ManifestRef ref{"manifest", &m};
  return LoaderAccess::Load(absl::MakeConstSpan(&ref, 1), false, source, nullptr,
                            std::move(device),
                            options, start, Since(start));
}

absl::StatusOr<LoadedWeights> LoadAllKeys(const ByteSource& source,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options) {
  return LoaderAccess::Load({}, true, source, nullptr, std::move(device), options,
                            Clock::now(), 0);
}

}  // namespace ptd
