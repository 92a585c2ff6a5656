#include "ptd/weight_set.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ptd/scalar_type.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

constexpr absl::StatusCode kDataLoss = absl::StatusCode::kDataLoss;

// First entry seen for a storage key (G4).
struct KeyOwner {
  uint64_t storage_nbytes;
  int32_t device_type;
  const std::string* fqn;     // Into the manifests; they outlive resolution.
  const std::string* source;
};

// Bytes of a segment reached by some view (G5).
struct Reach {
  uint64_t first = std::numeric_limits<uint64_t>::max();
  uint64_t end = 0;
  bool any_view = false;  // Some view (maybe empty) names the segment.
};

}  // namespace

ViewSpec ResolvedWeight::view() const {
  return ViewSpec{.element_size = *ElementSize(entry->dtype),
                  .storage_offset = entry->storage_offset,
                  .sizes = entry->sizes,
                  .strides = entry->strides};
}

WeightSet WeightSet::Resolve(const Container& container,
                             absl::Span<const ManifestInput> manifests,
                             Report* report) {
  return ResolveImpl(&container, nullptr, manifests, report);
}

WeightSet WeightSet::CheckWithoutContainer(absl::Span<const ManifestInput> manifests,
                                           Report* report) {
  return ResolveImpl(nullptr, nullptr, manifests, report);
}

WeightSet WeightSet::ResolveSizes(absl::Span<const ManifestInput> manifests,
                                  const StorageSizeFn& storage_size, Report* report) {
  return ResolveImpl(nullptr, &storage_size, manifests, report);
}

WeightSet WeightSet::ResolveImpl(const Container* container,
                                 const StorageSizeFn* storage_size,
                                 absl::Span<const ManifestInput> manifests,
                                 Report* report) {
  WeightSet set;
  const std::string file = container ? container->path() : std::string();
  absl::flat_hash_map<std::string_view, KeyOwner> owners;
  absl::flat_hash_set<std::string_view> referenced;
  std::vector<Reach> reach(container ? container->segments().size() : 0);

  for (const ManifestInput& in : manifests) {
    ResolvedManifest rm{.source = in.source, .manifest = in.manifest};
    rm.weights.reserve(in.manifest->entries.size());
    for (const WeightEntry& e : in.manifest->entries) {
      ResolvedWeight w{.entry = &e};
      // Built only for a diagnostic: resolution allocates nothing per entry.
      const auto where = [&](std::optional<uint64_t> segment = std::nullopt) {
        return Where{.file = file, .key = e.storage_key, .fqn = e.fqn,
                     .segment = segment, .source = in.source};
      };
      const auto name = [&] { return absl::StrCat("weight '", e.fqn, "'"); };
      // A malformed entry still references its key (no X3 for it).
      if (!e.storage_key.empty()) referenced.insert(e.storage_key);
      if (!e.well_formed) {  // The decoder reported it (M5/M6).
        rm.weights.push_back(w);
        continue;
      }
      bool ok = true;

      // G1, G2.
      const GeometryResult g = ComputeExtent(w.view());
      if (!g.ok()) {
        report->Error("G1", kDataLoss,
                      absl::StrCat(name(), ": view span arithmetic fails: ", g.detail),
                      where());
        ok = false;
      } else {
        w.extent = g.extent;
        if (g.extent.required_nbytes > e.storage_nbytes) {
          report->Error("G2", kDataLoss,
                        absl::StrCat(name(), ": view requires ",
                                     g.extent.required_nbytes, " bytes from a ",
                                     e.storage_nbytes, "-byte storage"),
                        where());
          ok = false;
        }
      }

      // G4, across every manifest of the run.
      auto [it, inserted] = owners.try_emplace(
          e.storage_key, KeyOwner{e.storage_nbytes, e.device_type, &e.fqn, &in.source});
      if (!inserted) {
        const KeyOwner& o = it->second;
        const auto disagree = [&](std::string_view field, auto mine, auto theirs) {
          if (mine == theirs) return;
          report->Error("G4", kDataLoss,
                        absl::StrCat(name(), ": storage '", e.storage_key, "' has ",
                                     internal::Sv(field), " ", mine, ", but weight '", *o.fqn,
                                     "' (", *o.source, ") says ", theirs),
                        where());
          ok = false;
        };
        disagree("storage_nbytes", e.storage_nbytes, o.storage_nbytes);
        disagree("device_type", e.device_type, o.device_type);
      }

      // X1, G3: with a container, or with the sizes of a storage source.
      if (container == nullptr) {
        if (storage_size == nullptr) {
          w.ok = false;
        } else if (const auto size = (*storage_size)(e.storage_key); !size) {
          report->Error("X1", absl::StatusCode::kNotFound,
                        absl::StrCat(name(), ": storage key '", e.storage_key,
                                     "' is not in the weight source"),
                        where());
          w.ok = false;
        } else if (*size != e.storage_nbytes) {
          report->Error("G3", kDataLoss,
                        absl::StrCat(name(), ": the bytes behind '", e.storage_key,
                                     "' are ", *size, " bytes, manifest says ",
                                     e.storage_nbytes),
                        where());
          w.ok = false;
        } else {
          w.ok = ok;
        }
        rm.weights.push_back(w);
        continue;
      }
      w.named = container->Find(e.storage_key);
      if (w.named == nullptr) {
        report->Error("X1", absl::StatusCode::kNotFound,
                      absl::StrCat(name(), ": storage key '", e.storage_key,
                                   "' is not in the .ptd"),
                      where());
        ok = false;
      } else if (const auto seg_size = container->SegmentSize(*w.named)) {
        if (*seg_size != e.storage_nbytes) {
          report->Error("G3", kDataLoss,
                        absl::StrCat(name(), ": segment ", w.named->segment_index,
                                     " behind '", e.storage_key, "' holds ",
                                     *seg_size, " bytes, manifest says ",
                                     e.storage_nbytes),
                        where(w.named->segment_index));
          ok = false;
        }
        if (!container->segments()[w.named->segment_index].in_bounds) ok = false;
        Reach& r = reach[w.named->segment_index];
        r.any_view = true;
        if (w.extent && !w.extent->empty() &&
            w.extent->required_nbytes <= *seg_size) {
          r.first = std::min(r.first, w.extent->first_byte);
          r.end = std::max(r.end, w.extent->required_nbytes);
        }
      } else {
        ok = false;  // C7 was reported by the container.
      }
      w.ok = ok;
      rm.weights.push_back(w);
    }
    set.manifests_.push_back(std::move(rm));
  }
  if (container == nullptr) return set;

  // G5: per segment, the bytes before the first and after the last byte any
  // view reaches. One warning per segment, naming one key behind it.
  std::vector<const NamedDataEntry*> seg_key(container->segments().size(), nullptr);
  for (const NamedDataEntry& nd : container->named_data()) {
    if (nd.segment_index < seg_key.size() && seg_key[nd.segment_index] == nullptr &&
        referenced.contains(nd.key)) {
      seg_key[nd.segment_index] = &nd;
    }
  }
  for (size_t i = 0; i < reach.size(); ++i) {
    const Reach& r = reach[i];
    const uint64_t size = container->segments()[i].size;
    if (!r.any_view || size == 0) continue;
    const Where where{.file = file,
                      .key = seg_key[i] ? std::optional(seg_key[i]->key) : std::nullopt,
                      .segment = i};
    const std::string key = seg_key[i] ? absl::StrCat(" ('", seg_key[i]->key, "')") : "";
    if (r.end == 0) {
      report->Warning("G5",
                      absl::StrCat("segment ", i, key, ": none of its ", size,
                                   " bytes is reached by any view"),
                      where);
    } else if (r.first > 0 || r.end < size) {
      report->Warning("G5",
                      absl::StrCat("segment ", i, key, ": views reach bytes [",
                                   r.first, ", ", r.end, ") of ", size, "; ",
                                   r.first, " bytes before and ", size - r.end,
                                   " bytes after are unused"),
                      where);
    }
  }

  // X3: weight storages that no manifest references.
  if (!manifests.empty()) {
    for (const NamedDataEntry& nd : container->named_data()) {
      if (absl::StartsWith(nd.key, internal::Sv(kCudaWeightKeyPrefix)) &&
          !referenced.contains(nd.key)) {
        report->Warning("X3",
                        absl::StrCat("storage key '", nd.key,
                                     "' is referenced by no manifest"),
                        Where{.file = file, .key = nd.key,
                              .segment = nd.segment_index});
      }
    }
  }
  return set;
}

absl::StatusOr<WeightSet> WeightSet::Open(const Container& container,
                                          absl::Span<const ManifestInput> manifests) {
  Report report;
  WeightSet set = Resolve(container, manifests, &report);
  if (!report.ok()) return report.FirstError();
  return set;
}

}  // namespace ptd
