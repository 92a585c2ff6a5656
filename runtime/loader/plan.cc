#include "runtime/loader/plan.h"

#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/rules.h"
#include "ptd/scalar_type.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd::internal {
namespace {

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
      match |= IsLibraryConstantKeyOf(key, lib);
    }
    match |= absl::StartsWith(Sv(e.fqn), absl::StrCat(lib, ":"));
    if (match && lib.size() >= best_len) {
      best = v;
      best_len = lib.size();
    }
  }
  return best;
}

// The variant chosen for `m`: the capability decides; without one, a single
// untargeted variant wins, and otherwise none is chosen.
absl::StatusOr<std::optional<size_t>> ChooseVariant(const ResolvedManifest& m,
                                                    std::optional<uint32_t> sm) {
  const std::vector<Variant>& variants = m.manifest->manifest.variants;
  if (sm) {
    auto c = SelectVariant(variants, *sm);
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("manifest ", m.source(), ": ", c.status().message()));
    }
    return std::optional<size_t>(c->index);
  }
  if (variants.size() == 1 && variants[0].target_sm == 0) return std::optional<size_t>(0);
  return std::optional<size_t>();
}

// The plan's one dtype check (M5; verification has made it already).
absl::StatusOr<uint32_t> CheckedElementSize(const WeightEntry& e) {
  const std::optional<uint32_t> elem = ElementSize(e.dtype);
  if (!elem) {
    return RuleError(absl::StatusCode::kInvalidArgument, "M5",
                     absl::StrCat("weight '", Sv(e.fqn), "': unknown dtype ", e.dtype));
  }
  return *elem;
}

// The plan's storages, one per (key, placement), or with `share_segments`
// (LoadOptions::share_segments) one per (segment, placement). Keys
// are views into strings that outlive the load (the manifests, the plan's
// copy of the source's key list, the container).
//
// With the container behind the source, keys are found through its entries
// (the resolver's, or one index lookup) and deduplicated in arrays indexed
// by entry and by segment: no hashing per weight. Otherwise through the
// source's Locate and Size, with hash maps.
class StorageTable {
 public:
  StorageTable(const ByteSource& source, const Container* container, bool share_segments,
               LoadPlan* plan)
      : source_(source), container_(container), share_segments_(share_segments), plan_(*plan) {}

  // The storage for `key` with placement `p`; adds it on first use.
  absl::StatusOr<uint32_t> Add(std::string_view key, Residency p) {
    if (container_ != nullptr) {
      if (const NamedDataEntry* e = container_->Find(key)) return Add(*e, p);
    }
    auto& by_key = by_key_[IndexOf(p)];
    if (auto it = by_key.find(key); it != by_key.end()) return it->second;
    const std::optional<ByteSource::Location> loc = source_.Locate(key);
    uint32_t index = static_cast<uint32_t>(plan_.storages.size());
    bool fresh = true;
    if (loc && share_segments_) {
      auto [it, inserted] = by_segment_[IndexOf(p)].try_emplace(loc->segment, index);
      index = it->second;
      fresh = inserted;
    }
    if (fresh) {
      PTD_ASSIGN_OR_RETURN(const uint64_t size, source_.Size(key));
      AddStorage(StorageJob{.key = key, .nbytes = size, .location = loc}, p);
    }
    plan_.keys.push_back({index, key});
    by_key.emplace(key, index);
    return index;
  }

  // The storage behind `named`, an entry of the container given at
  // construction (REQUIRES: one was).
  absl::StatusOr<uint32_t> Add(const NamedDataEntry& named, Residency p) {
    const std::vector<Segment>& segments = container_->segments();
    if (named.segment_index >= segments.size() || !segments[named.segment_index].in_bounds) {
      // Not readable; the source's own lookup reports why.
      PTD_RETURN_IF_ERROR(source_.Size(named.key).status());
      return absl::NotFoundError(
          absl::StrCat(source_.name(), ": no readable key '", Sv(named.key), "'"));
    }
    std::vector<uint32_t>& by_entry = by_entry_[IndexOf(p)];
    std::vector<uint32_t>& by_segment = by_segment_index_[IndexOf(p)];
    if (by_entry.empty()) {
      by_entry.assign(container_->named_data().size(), kNone);
      by_segment.assign(segments.size(), kNone);
    }
    const size_t entry = static_cast<size_t>(&named - container_->named_data().data());
    if (by_entry[entry] != kNone) return by_entry[entry];
    uint32_t fresh_index = kNone;
    uint32_t& index = share_segments_ ? by_segment[named.segment_index] : fresh_index;
    if (index == kNone) {
      index = static_cast<uint32_t>(plan_.storages.size());
      AddStorage(StorageJob{.key = named.key,
                            .nbytes = segments[named.segment_index].size,
                            .location =
                                ByteSource::Location{
                                    .segment = named.segment_index,
                                    .offset = container_->SegmentFileOffset(named.segment_index)}},
                 p);
    }
    plan_.keys.push_back({index, named.key});
    by_entry[entry] = index;
    return index;
  }

  void Reserve(size_t n) {
    plan_.storages.reserve(n);
    plan_.residency.reserve(n);
    plan_.keys.reserve(n);
  }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};

  void AddStorage(StorageJob job, Residency p) {
    plan_.total_bytes += job.nbytes;
    plan_.storages.push_back(job);
    plan_.residency.push_back(p);
  }

  const ByteSource& source_;
  const Container* container_;
  const bool share_segments_;
  LoadPlan& plan_;
  std::array<absl::flat_hash_map<std::string_view, uint32_t>, kNumResidencies> by_key_;
  std::array<absl::flat_hash_map<uint64_t, uint32_t>, kNumResidencies> by_segment_;
  std::array<std::vector<uint32_t>, kNumResidencies> by_entry_;          // Entry -> storage.
  std::array<std::vector<uint32_t>, kNumResidencies> by_segment_index_;  // Segment -> storage.
};

// Plans the weights of the manifests, one entry at a time.
class WeightPlanner {
 public:
  WeightPlanner(const ByteSource& source, const Container* container, const Device& device,
                const PlanOptions& options, LoadPlan* plan)
      : container_(container),
        device_is_host_(device.kind() == DeviceKind::kHost),
        sm_(options.sm ? options.sm : device.compute_capability()),
        wanted_(options.fqns.begin(), options.fqns.end()),
        plan_(*plan),
        table_(source, container, options.share_segments, plan) {}

  absl::Status PlanManifest(uint32_t mi, const ResolvedManifest& m) {
    PTD_ASSIGN_OR_RETURN(const std::optional<size_t> chosen, ChooseVariant(m, sm_));
    plan_.chosen_variants.push_back(chosen);
    const std::vector<WeightEntry>& entries = m.entries();
    const bool resolved = m.weights.size() == entries.size();
    plan_.weights.reserve(plan_.weights.size() + entries.size());
    table_.Reserve(plan_.weights.capacity());
    for (size_t ei = 0; ei < entries.size(); ++ei) {
      PTD_RETURN_IF_ERROR(PlanEntry(mi, m.manifest->manifest, chosen, entries[ei],
                                    resolved ? &m.weights[ei] : nullptr));
    }
    return absl::OkStatus();
  }

  // After every manifest: each fqn asked for was planned.
  absl::Status CheckEveryFqnFound(absl::Span<const std::string> fqns) const {
    for (const std::string& fqn : fqns) {
      if (found_.contains(fqn)) continue;
      if (auto it = skipped_.find(fqn); it != skipped_.end()) {
        return absl::FailedPreconditionError(absl::StrCat("weight '", fqn, "' is ", it->second));
      }
      return absl::NotFoundError(absl::StrCat("weight '", fqn, "' is in no manifest"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status PlanEntry(uint32_t mi, const Manifest& m, std::optional<size_t> chosen,
                         const WeightEntry& e, const ResolvedWeight* resolved) {
    if (e.runtime_owned()) {
      if (wanted_.contains(e.fqn)) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight '", Sv(e.fqn), "' is runtime-owned (", Sv(kRuntimeOwnedPrefix),
                         "*): it has no stored bytes to load; the runtime allocates it"));
      }
    } else if ((!wanted_.empty() && !wanted_.contains(e.fqn)) ||
               IsOtherVariantsConstant(m, chosen, e)) {
      return absl::OkStatus();
    }
    PTD_ASSIGN_OR_RETURN(const uint32_t element_size, CheckedElementSize(e));
    if (e.runtime_owned()) {
      // Never planned: no storage lookup, no read, no allocation.
      if (!wanted_.empty()) return absl::OkStatus();
      if (resolved == nullptr || !resolved->extent) {
        return RuleError(absl::StatusCode::kDataLoss, "G1",
                         absl::StrCat("weight '", Sv(e.fqn), "': view span arithmetic fails"));
      }
      plan_.runtime_owned.push_back(
          PlannedRuntimeOwned{&e, mi, element_size, resolved->extent->required_nbytes});
      return absl::OkStatus();
    }
    if (!wanted_.empty()) found_.insert(e.fqn);
    const Residency p =
        e.device_type == kDeviceTypeCpu && !device_is_host_ ? Residency::kHost : Residency::kDevice;
    const NamedDataEntry* named =
        container_ != nullptr && resolved != nullptr ? resolved->named : nullptr;
    PTD_ASSIGN_OR_RETURN(const uint32_t s,
                         named ? table_.Add(*named, p) : table_.Add(e.storage_key, p));
    plan_.weights.push_back(PlannedWeight{.entry = &e, .storage = s, .manifest = mi});
    return absl::OkStatus();
  }

  // True, and the reason recorded, when `e` is a library-local constant of
  // a variant other than the chosen one (of a manifest with several).
  bool IsOtherVariantsConstant(const Manifest& m, std::optional<size_t> chosen,
                               const WeightEntry& e) {
    if (!chosen || m.variants.size() <= 1) return false;
    const std::optional<size_t> lib = LibraryOf(e, m);
    const std::string& mine = m.variants[*chosen].so_blob_key;
    if (!lib || m.variants[*lib].so_blob_key == mine) return false;
    skipped_.try_emplace(e.fqn,
                         absl::StrCat("a constant of library '", m.variants[*lib].so_blob_key,
                                      "', not of the chosen variant's '", mine, "'"));
    return true;
  }

  const Container* container_;
  const bool device_is_host_;
  const std::optional<uint32_t> sm_;
  const absl::flat_hash_set<std::string_view> wanted_;
  absl::flat_hash_set<std::string_view> found_;
  absl::flat_hash_map<std::string_view, std::string> skipped_;  // fqn -> why.
  LoadPlan& plan_;
  StorageTable table_;
};

}  // namespace

absl::StatusOr<LoadPlan> PlanLoad(absl::Span<const ResolvedManifest> manifests, bool all_keys,
                                  const ByteSource& source, const Container* container,
                                  const Device& device, const PlanOptions& options) {
  LoadPlan plan;
  if (all_keys) {
    plan.source_keys = source.Keys();
    StorageTable table(source, container, options.share_segments, &plan);
    table.Reserve(plan.source_keys.size());
    for (const std::string& key : plan.source_keys) {
      PTD_RETURN_IF_ERROR(table.Add(key, Residency::kDevice).status());
    }
    return plan;
  }
  WeightPlanner planner(source, container, device, options, &plan);
  for (uint32_t mi = 0; mi < manifests.size(); ++mi) {
    PTD_RETURN_IF_ERROR(planner.PlanManifest(mi, manifests[mi]));
  }
  PTD_RETURN_IF_ERROR(planner.CheckEveryFqnFound(options.fqns));
  return plan;
}

}  // namespace ptd::internal
