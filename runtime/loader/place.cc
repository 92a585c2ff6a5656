#include "runtime/loader/place.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "ptd/host_device.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/budget_split.h"

namespace ptd::internal {
namespace {

// Padding between two mapped storages that one mapping may span (it is
// mapped and populated with them; a subset load of scattered weights gets
// several mappings instead of one over the whole file).
constexpr uint64_t kMapMaxGapBytes = uint64_t{1} << 20;

// A storage in a run (FileRuns) is at least this aligned in device memory:
// AOTInductor's own constant alignment (Triton and TMA kernels assume 16).
// A run starts at AllocateMany's kDeviceAlignment.
constexpr uint64_t kStorageAlignment = 64;
static_assert(kDeviceAlignment % kStorageAlignment == 0);
// The most padding after a storage that a run keeps (and copies along,
// into unused device memory): what rounding it to kDeviceAlignment leaves,
// which is what the placement counted for it (PlaceStorages), so that a
// run never takes more than the budget placed; the file's alignment padding
// fits, a storage not loaded between two does not.
uint64_t RunSlack(uint64_t nbytes) {
  return (nbytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment - nbytes;
}

// Per storage: whether host_fqns names a weight on it (without a manifest,
// a key of it). Only storages bound for the device are looked at.
std::vector<bool> HostFirst(const LoadPlan& plan, bool all_keys, const PlaceOptions& options) {
  std::vector<bool> host_first(plan.storages.size(), false);
  if (options.host_fqns.empty()) return host_first;
  if (all_keys) {
    for (const PlannedKey& k : plan.keys) {
      if (MatchesAny(options.host_fqns, k.key)) host_first[k.storage] = true;
    }
    return host_first;
  }
  for (const PlannedWeight& w : plan.weights) {
    if (plan.residency[w.storage] == Residency::kDevice && !host_first[w.storage] &&
        MatchesAny(options.host_fqns, w.entry->fqn)) {
      host_first[w.storage] = true;
    }
  }
  return host_first;
}

// Splits placed->to_device between device memory and mapped host memory by
// the budget and host_fqns, after checking the split against the device.
absl::Status SplitByBudget(const LoadPlan& plan, bool all_keys, Device& device,
                           const PlaceOptions& options, PlacedStorages* placed) {
  const std::vector<bool> host_first = HostFirst(plan, all_keys, options);
  std::vector<uint64_t> sizes;
  std::vector<bool> first;
  sizes.reserve(placed->to_device.size());
  first.reserve(placed->to_device.size());
  for (uint32_t s : placed->to_device) {
    sizes.push_back(plan.storages[s].nbytes);
    first.push_back(host_first[s]);
  }
  const BudgetPlacement split = PlaceStorages(sizes, first, options.device_budget_bytes);
  if (options.device_budget_bytes || split.mapped_storages > 0) {
    auto info = device.MemoryInfo();
    if (!info.ok()) {
      return absl::Status(
          info.status().code(),
          absl::StrCat("placing storages by ",
                       options.device_budget_bytes ? "a device budget" : "host_fqns", " on ",
                       device.name(), ": ", info.status().message()));
    }
    PTD_ASSIGN_OR_RETURN(
        placed->mapped_reservation,
        ReserveMappedHost(split, options.device_budget_bytes, *std::move(info), device.name()));
  }
  std::vector<uint32_t> on_device;
  on_device.reserve(split.device_storages);
  placed->to_mapped_host.reserve(split.mapped_storages);
  for (size_t k = 0; k < placed->to_device.size(); ++k) {
    const uint32_t s = placed->to_device[k];
    if (split.mapped[k]) placed->residency[s] = Residency::kMappedHost;
    (split.mapped[k] ? placed->to_mapped_host : on_device).push_back(s);
  }
  placed->to_device = std::move(on_device);
  return absl::OkStatus();
}

// The storages of `list` that the source can map (located, non-empty, at a
// kHostAlignment multiple) become views of private mappings, one per run of
// neighbours in the file; they leave `list`, which keeps the storages still
// to be allocated and read. A source that cannot map leaves everything.
absl::Status MapList(const ByteSource& source, size_t threads, std::vector<StorageJob>& jobs,
                     std::vector<uint32_t>* list, PlacedStorages* placed, LoadStats* stats) {
  std::vector<uint32_t> candidates, rest;
  // A segment maps once: a second storage of it (another key on the same
  // bytes, without LoadOptions::share_segments) is read into memory of its
  // own, since a mapping's pages would be shared between them.
  absl::flat_hash_set<uint64_t> segments;
  for (uint32_t s : *list) {
    const StorageJob& j = jobs[s];
    const bool mappable = j.location && j.nbytes > 0 && j.location->offset % kHostAlignment == 0 &&
                          segments.insert(j.location->segment).second;
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
      const StorageJob& j = jobs[candidates[last]];
      if (j.location->offset > end + kMapMaxGapBytes) break;
      end = std::max(end, j.location->offset + j.nbytes);
    }
    auto mapping = source.MapLocated(begin, end - begin, threads);
    if (!mapping.ok()) {
      if (absl::IsUnimplemented(mapping.status()) && first == 0) {
        return absl::OkStatus();  // This source reads; so does the load.
      }
      const StorageJob& j = jobs[candidates[first]];
      return absl::Status(
          mapping.status().code(),
          absl::StrCat("storage '", Sv(j.key), "' (", j.nbytes, " bytes",
                       last - first > 1 ? absl::StrCat(", mapped with ", last - first - 1,
                                                       " neighbouring storage(s)")
                                        : std::string(),
                       "): map: ", mapping.status().message()));
    }
    const std::shared_ptr<void> block = *mapping;
    ++stats->mappings;
    for (size_t k = first; k < last; ++k) {
      const uint32_t s = candidates[k];
      uint8_t* data = mapping->get() + (jobs[s].location->offset - begin);
      placed->buffers[s] = DeviceBuffer(block, data, static_cast<size_t>(jobs[s].nbytes));
      jobs[s].dest = data;
      placed->file_mapped.push_back(s);
      ++stats->mapped;
      stats->mapped_bytes += jobs[s].nbytes;
    }
    first = last;
  }
  *list = std::move(rest);
  return absl::OkStatus();
}

// Runs of `list` (in file order) for a device the staging ring copies to,
// or for mapped host memory: storages whose file offsets, from the run's
// first, keep kStorageAlignment and whose gaps are at most RunSlack. Each
// run is one buffer laid out as the file is (gaps and all), so that the
// staged copy of its pieces in a slot is one copy, and a packed read into
// mapped memory goes straight in (no scratch, no memcpy). With
// `pack_unlocated` (staged only), storages without a location form a run
// of their own too. Returns, per run, [first, last) indices into `list`.
std::vector<std::pair<size_t, size_t>> FileRuns(std::vector<StorageJob>& jobs,
                                                const std::vector<uint32_t>& list,
                                                bool pack_unlocated) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t k = 0; k < list.size(); ++k) {
    StorageJob& j = jobs[list[k]];
    if (!j.location && !pack_unlocated) {
      runs.emplace_back(k, k + 1);
      continue;
    }
    if (!j.location) {
      // Without a location (sorted last): one run of their own, each at the
      // next kStorageAlignment, so that the staged reads pack them.
      if (runs.empty() || jobs[list[runs.back().first]].location) {
        runs.emplace_back(k, k);
        j.packed_offset = 0;
      } else {
        const StorageJob& prev = jobs[list[k - 1]];
        j.packed_offset = (*prev.packed_offset + prev.nbytes + kStorageAlignment - 1) /
                          kStorageAlignment * kStorageAlignment;
      }
      runs.back().second = k + 1;
      continue;
    }
    // Located storages come first (sorted so): `first` and `prev` are too.
    if (!runs.empty()) {
      const StorageJob& first = jobs[list[runs.back().first]];
      const StorageJob& prev = jobs[list[k - 1]];
      if (j.location->offset >= prev.location->offset + prev.nbytes &&
          j.location->offset - (prev.location->offset + prev.nbytes) <= RunSlack(prev.nbytes) &&
          (j.location->offset - first.location->offset) % kStorageAlignment == 0) {
        runs.back().second = k + 1;
        continue;
      }
    }
    runs.emplace_back(k, k + 1);
  }
  return runs;
}

// One AllocateMany (or AllocateMappedMany) of `dev` for the storages of
// `list`, sorted in file order first (the unlocated after, as planned): the
// pieces of a packed read (PlanReads, in file order) then lie in the arena
// as in the file, so that a host device reads straight into them and a GPU
// copies a staging slot with one cudaMemcpyAsync, whatever the order in
// which the manifest names the storages. For a device the staging ring
// copies to, storages go in runs (FileRuns) at their file distances; each
// is at least kStorageAlignment-aligned.
absl::Status AllocateList(Device& dev, bool mapped_host, std::vector<StorageJob>& jobs,
                          std::vector<uint32_t>* list, PlacedStorages* placed, LoadStats* stats) {
  if (list->empty()) return absl::OkStatus();
  const auto in_file_order = [&](uint32_t a, uint32_t b) {
    const auto& la = jobs[a].location;
    const auto& lb = jobs[b].location;
    if (!la || !lb) return la.has_value() && !lb.has_value();
    return la->offset < lb->offset;
  };
  // Usually in file order already (a manifest names storages as the file
  // lays them out): a linear check spares the sort (at 65,536 storages, 6%
  // of a whole ptd-load's instructions).
  if (!std::is_sorted(list->begin(), list->end(), in_file_order)) {
    std::stable_sort(list->begin(), list->end(), in_file_order);
  }
  std::vector<std::pair<size_t, size_t>> runs;
  if (mapped_host || !dev.host_accessible()) {
    runs = FileRuns(jobs, *list, /*pack_unlocated=*/!mapped_host);
  } else {
    runs.reserve(list->size());
    for (size_t k = 0; k < list->size(); ++k) runs.emplace_back(k, k + 1);
  }
  // Where each storage lies in its run's buffer.
  const auto offset_in_run = [&](const StorageJob& first, const StorageJob& j) -> uint64_t {
    return j.location ? j.location->offset - first.location->offset : *j.packed_offset;
  };
  std::vector<size_t> sizes;
  sizes.reserve(runs.size());
  for (const auto& [first, last] : runs) {
    const StorageJob& a = jobs[(*list)[first]];
    const StorageJob& b = jobs[(*list)[last - 1]];
    sizes.push_back(
        static_cast<size_t>(last - first == 1 ? a.nbytes : offset_in_run(a, b) + b.nbytes));
  }
  auto got = mapped_host ? dev.AllocateMappedMany(sizes) : dev.AllocateMany(sizes);
  ++stats->allocations;
  if (!got.ok()) {
    std::string what = absl::StrCat(list->size(), " storages");
    size_t index = 0;
    const auto payload = got.status().GetPayload(kAllocateManyIndexPayload);
    if (payload && absl::SimpleAtoi(std::string(*payload), &index) && index < runs.size()) {
      const auto [first, last] = runs[index];
      const StorageJob& j = jobs[(*list)[first]];
      what = last - first == 1
                 ? absl::StrCat("storage '", Sv(j.key), "' (", j.nbytes, " bytes)")
                 : absl::StrCat("storage '", Sv(j.key), "' and the ", last - first - 1,
                                " after it, laid out as in the file (", sizes[index], " bytes)");
    }
    return absl::Status(
        got.status().code(),
        absl::StrCat(what, ": allocate ", mapped_host ? "mapped host memory for " : "on ",
                     dev.name(), ": ", got.status().message()));
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto [first, last] = runs[r];
    const bool one = last - first == 1;
    if (!one) ++placed->runs;
    const StorageJob& run_first = jobs[(*list)[first]];
    for (size_t k = first; k < last; ++k) {
      const uint32_t s = (*list)[k];
      placed->buffers[s] =
          one ? std::move((*got)[r])
              : (*got)[r].Slice(static_cast<size_t>(offset_in_run(run_first, jobs[s])),
                                static_cast<size_t>(jobs[s].nbytes));
      jobs[s].dest = static_cast<uint8_t*>(placed->buffers[s].data());
      jobs[s].run = one ? StorageJob::kNoRun : placed->runs - 1;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlaceOptions(const Device& device, const LoadOptions& options) {
  const std::optional<LoadOptionField> bad = InapplicableLoadOption(device.kind(), options);
  if (!bad) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(*bad == LoadOptionField::kDeviceBudgetBytes ? "LoadOptions::device_budget_bytes"
                                                               : "LoadOptions::host_fqns",
                   " places storages in host memory mapped for a GPU; ", device.name(),
                   " is the host (every storage is in host memory already)"));
}

absl::StatusOr<PlacedStorages> Place(const LoadPlan& plan, bool all_keys, Device& device,
                                     const PlaceOptions& options) {
  const bool device_is_host = device.kind() == DeviceKind::kHost;
  const bool by_budget = options.device_budget_bytes || !options.host_fqns.empty();
  PlacedStorages placed;
  const size_t n = plan.storages.size();
  const size_t num_host = static_cast<size_t>(
      std::count(plan.residency.begin(), plan.residency.end(), Residency::kHost));
  placed.residency.assign(n, device_is_host ? Residency::kHost : Residency::kDevice);
  placed.to_device.reserve(n - num_host);
  placed.to_host.reserve(num_host);
  for (uint32_t s = 0; s < n; ++s) {
    if (plan.residency[s] == Residency::kHost) {
      placed.residency[s] = Residency::kHost;
      placed.to_host.push_back(s);
    } else {
      placed.to_device.push_back(s);
    }
  }
  // Before anything is mapped or allocated.
  if (by_budget) PTD_RETURN_IF_ERROR(SplitByBudget(plan, all_keys, device, options, &placed));
  placed.buffers.resize(n);
  return placed;
}

absl::Status MapFromFile(const ByteSource& source, size_t threads_wanted, const Device& device,
                         std::vector<StorageJob>* storages, PlacedStorages* placed,
                         LoadStats* stats) {
  const size_t threads = std::max<size_t>(1, threads_wanted);
  if (device.kind() == DeviceKind::kHost && device.host_accessible()) {
    PTD_RETURN_IF_ERROR(MapList(source, threads, *storages, &placed->to_device, placed, stats));
  }
  return MapList(source, threads, *storages, &placed->to_host, placed, stats);
}

bool HintLoadAllocation(Device& device, const BundlePaths& paths, const LoadOptions& options) {
  if (!options.fqns.empty() || options.map_file || paths.ptd.empty()) return false;
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(paths.ptd, error);
  if (error || size == 0 || size > UINT64_MAX) return false;
  device.PrepareAllocation(static_cast<uint64_t>(size));
  return true;
}

absl::Status Allocate(Device& device, std::vector<StorageJob>* storages,
                      const std::vector<Residency>& bound, uint64_t mapped_block_bytes,
                      PlacedStorages* placed, LoadStats* stats) {
  const bool file_mapped_host =
      std::any_of(placed->file_mapped.begin(), placed->file_mapped.end(),
                  [&](uint32_t s) { return bound[s] == Residency::kHost; });
  if (!placed->to_host.empty() || file_mapped_host) {
    placed->host_device = std::make_shared<HostDevice>();
  }
  PTD_RETURN_IF_ERROR(AllocateList(device, false, *storages, &placed->to_device, placed, stats));
  if (!placed->to_host.empty()) {
    PTD_RETURN_IF_ERROR(
        AllocateList(*placed->host_device, false, *storages, &placed->to_host, placed, stats));
  }
  // The mapped share in blocks, in file order (the unlocated after), each
  // at most mapped_block_bytes counted as the arena will (kDeviceAlignment
  // rounding); a larger storage alone.
  std::vector<uint32_t>& mapped = placed->to_mapped_host;
  std::stable_sort(mapped.begin(), mapped.end(), [&](uint32_t a, uint32_t b) {
    const auto& la = (*storages)[a].location;
    const auto& lb = (*storages)[b].location;
    if (!la || !lb) return la.has_value() && !lb.has_value();
    return la->offset < lb->offset;
  });
  placed->mapped_blocks.clear();
  uint64_t block_bytes = 0;
  for (uint32_t s : mapped) {
    const uint64_t n = (*storages)[s].nbytes + RunSlack((*storages)[s].nbytes);
    if (placed->mapped_blocks.empty() ||
        block_bytes + n > std::max<uint64_t>(mapped_block_bytes, 1)) {
      placed->mapped_blocks.emplace_back();
      block_bytes = 0;
    }
    placed->mapped_blocks.back().push_back(s);
    block_bytes += n;
  }
  if (placed->mapped_blocks.empty()) {
    placed->mapped_reservation.reset();
    return absl::OkStatus();
  }
  return AllocateMappedBlock(device, 0, storages, placed, stats);
}

absl::Status AllocateMappedBlock(Device& device, size_t k, std::vector<StorageJob>* storages,
                                 PlacedStorages* placed, LoadStats* stats) {
  const absl::Status st =
      AllocateList(device, true, *storages, &placed->mapped_blocks[k], placed, stats);
  // Allocated (pinned) or not, the host now shows the last block: the hold
  // ends.
  if (k + 1 == placed->mapped_blocks.size() || !st.ok()) placed->mapped_reservation.reset();
  return st;
}

}  // namespace ptd::internal
