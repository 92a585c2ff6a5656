#include "ptd/weight_set.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

constexpr absl::StatusCode kDataLoss = absl::StatusCode::kDataLoss;

// First entry seen for a storage key (G4).
struct KeyOwner {
  uint64_t storage_nbytes = 0;
  int32_t device_type = 0;
  std::string_view fqn;  // Views the manifests' names; they outlive resolution.
  const std::string* source = nullptr;
};

// Bytes of a segment reached by some view (G5).
struct Reach {
  uint64_t first = std::numeric_limits<uint64_t>::max();
  uint64_t end = 0;
  bool any_view = false;  // Some view (maybe empty) names the segment.
};

// One resolution run: the state the rules share across manifests.
class Resolver {
 public:
  Resolver(const Container* container, const WeightSet::StorageSizeFn* storage_size, Report* report)
      : container_(container),
        storage_size_(storage_size),
        report_(report),
        file_(container ? container->path() : std::string()),
        referenced_(container ? container->named_data().size() : 0),
        key_owners_(container ? container->named_data().size() : 0),
        reach_(container ? container->segments().size() : 0),
        all_keys_indexed_(container != nullptr && container->AllKeysIndexed()) {}

  // Sizes the table of keys not in a container for `entries` entries in all
  // (no rehashing while resolving).
  void Reserve(size_t entries) {
    if (container_ == nullptr) owners_.reserve(entries);
  }

  // The container entry of `key`. Exporters write the manifest's entries in
  // the order of the container's keys, so the entry after the last one
  // found is tried first: a sequential walk over the key list instead of a
  // random probe of the index per entry (memory latency, not hashing, is
  // what a lookup costs at 100,000 keys). Same result as Container::Find:
  // keys are unique (C6), and a duplicated key is found through the index.
  const NamedDataEntry* FindKey(std::string_view key) {
    const std::vector<NamedDataEntry>& named = container_->named_data();
    if (next_guess_ < named.size() && named[next_guess_].key == key) {
      const NamedDataEntry* e = &named[next_guess_];
      if (all_keys_indexed_ || container_->Find(key) == e) {
        ++next_guess_;
        return e;
      }
    }
    const NamedDataEntry* e = container_->Find(key);
    if (e != nullptr) next_guess_ = Index(e) + 1;
    return e;
  }

  // Every check of one entry of the manifest `in`. With a container the
  // entry's key is looked up once: that lookup marks it referenced (G5,
  // X3), finds its first owner (G4) and its segment (X1, G3, R1).
  ResolvedWeight ResolveEntry(const WeightEntry& e, const SourcedManifest& in) {
    ResolvedWeight w{.entry = &e, .runtime_owned = e.runtime_owned()};
    const NamedDataEntry* named = nullptr;
    if (container_ != nullptr && !e.storage_key.empty()) {
      named = FindKey(e.storage_key);
      // A malformed entry still references its key (no X3 for it).
      if (named != nullptr) referenced_[Index(named)] = true;
    }
    if (!e.well_formed) return w;  // The decoder reported it (M5/M6).
    const std::string& file = in.file.empty() ? file_ : in.file;
    const bool view_ok = CheckGeometry(e, in.source, file, &w);
    const bool shared_ok = CheckSharedStorage(e, named, in.source, file);
    bool ok = view_ok && shared_ok;
    if (w.runtime_owned) {
      // No X1, no G3: the runtime allocates it. Stored bytes are R1.
      ReportStoredRuntimeOwned(e, named, in.source);
      w.ok = ok && (container_ != nullptr || storage_size_ != nullptr);
      return w;
    }
    // X1, G3: with a container, or with the sizes of a storage source. G3
    // is left out after a G4 disagreement: one cause, reported once.
    if (container_ != nullptr) {
      ok &= LocateStorage(e, named, in.source, view_ok, shared_ok, &w);
    } else if (storage_size_ != nullptr) {
      ok &= CheckStorageSize(e, in.source, shared_ok);
    } else {
      ok = false;
    }
    w.ok = ok;
    return w;
  }

  // G5: per segment, the bytes before the first and after the last byte any
  // view reaches. One warning per segment, naming one key behind it.
  void ReportUnreachedBytes() {
    const std::vector<bool>& referenced = ReferencedKeys();
    const auto& named = container_->named_data();
    std::vector<const NamedDataEntry*> seg_key(container_->segments().size(), nullptr);
    for (size_t k = 0; k < named.size(); ++k) {
      const NamedDataEntry& nd = named[k];
      if (nd.segment_index < seg_key.size() && seg_key[nd.segment_index] == nullptr &&
          referenced[k]) {
        seg_key[nd.segment_index] = &nd;
      }
    }
    for (size_t i = 0; i < reach_.size(); ++i) {
      const Reach& r = reach_[i];
      const uint64_t size = container_->segments()[i].size;
      if (!r.any_view || size == 0) continue;
      if (r.end != 0 && r.first == 0 && r.end >= size) continue;  // All reached.
      // Built only for a warning.
      const Where where{
          .file = file_,
          .key = seg_key[i] ? std::optional<std::string>(seg_key[i]->key) : std::nullopt,
          .segment = i};
      const std::string key =
          seg_key[i] ? absl::StrCat(" ('", internal::Sv(seg_key[i]->key), "')") : "";
      if (r.end == 0) {
        report_->Warning("G5",
                         absl::StrCat("segment ", i, key, ": none of its ", size,
                                      " bytes is reached by any view"),
                         where);
      } else {
        report_->Warning("G5",
                         absl::StrCat("segment ", i, key, ": views reach bytes [", r.first, ", ",
                                      r.end, ") of ", size, "; ", r.first, " bytes before and ",
                                      size - r.end, " bytes after are unused"),
                         where);
      }
    }
  }

  // X3: weight storages that no manifest references.
  void ReportOrphans() {
    const std::vector<bool>& referenced = ReferencedKeys();
    const auto& named = container_->named_data();
    for (size_t k = 0; k < named.size(); ++k) {
      const NamedDataEntry& nd = named[k];
      if (!referenced[k] && IsCudaWeightKey(nd.key)) {
        report_->Warning(
            "X3",
            absl::StrCat("storage key '", internal::Sv(nd.key), "' is referenced by no manifest"),
            Where{.file = file_, .key = std::string(nd.key), .segment = nd.segment_index});
      }
    }
  }

 private:
  // Built only for a diagnostic: resolution allocates nothing per entry.
  Where At(const WeightEntry& e, const std::string& source,
           std::optional<uint64_t> segment = std::nullopt) const {
    return At(e, source, file_, segment);
  }
  static Where At(const WeightEntry& e, const std::string& source, const std::string& file,
                  std::optional<uint64_t> segment = std::nullopt) {
    return Where{.file = file,
                 .key = std::string(e.storage_key),
                 .fqn = std::string(e.fqn),
                 .segment = segment,
                 .source = source};
  }
  static std::string Name(const WeightEntry& e) {
    return absl::StrCat("weight '", internal::Sv(e.fqn), "'");
  }

  // G1, G2. Diagnostics name `file`: the manifest's.
  bool CheckGeometry(const WeightEntry& e, const std::string& source, const std::string& file,
                     ResolvedWeight* w) {
    const GeometryResult g = ComputeExtent(w->view());
    if (!g.ok()) {
      report_->Error("G1", kDataLoss,
                     absl::StrCat(Name(e), ": view span arithmetic fails: ", g.detail),
                     At(e, source, file));
      return false;
    }
    w->extent = g.extent;
    if (g.extent.required_nbytes > e.storage_nbytes) {
      report_->Error("G2", kDataLoss,
                     absl::StrCat(Name(e), ": view requires ", g.extent.required_nbytes,
                                  " bytes from a ", e.storage_nbytes, "-byte storage"),
                     At(e, source, file));
      return false;
    }
    return true;
  }

  // The position of a container's entry in its named data.
  size_t Index(const NamedDataEntry* named) const {
    return static_cast<size_t>(named - container_->named_data().data());
  }

  // G4, across every manifest of the run. Diagnostics name `file`. The first
  // owner of a key in the container is kept by the key's position (`named`),
  // of any other key by name.
  bool CheckSharedStorage(const WeightEntry& e, const NamedDataEntry* named,
                          const std::string& source, const std::string& file) {
    const KeyOwner owner{e.storage_nbytes, e.device_type, e.fqn, &source};
    const KeyOwner* first = nullptr;
    if (named != nullptr) {
      KeyOwner& slot = key_owners_[Index(named)];
      if (slot.source == nullptr) {
        slot = owner;
        return true;
      }
      first = &slot;
    } else {
      auto [it, inserted] = owners_.try_emplace(e.storage_key, owner);
      if (inserted) return true;
      first = &it->second;
    }
    const KeyOwner& o = *first;
    bool ok = true;
    const auto disagree = [&](std::string_view field, auto mine, auto theirs) {
      if (mine == theirs) return;
      report_->Error("G4", kDataLoss,
                     absl::StrCat(Name(e), ": storage '", internal::Sv(e.storage_key), "' has ",
                                  internal::Sv(field), " ", mine, ", but weight '",
                                  internal::Sv(o.fqn), "' (", *o.source, ") says ", theirs),
                     At(e, source, file));
      ok = false;
    };
    disagree("storage_nbytes", e.storage_nbytes, o.storage_nbytes);
    disagree("device_type", e.device_type, o.device_type);
    return ok;
  }

  // R1: a runtime-owned entry whose key has stored bytes anyway. The key is
  // referenced (no X3) and its segment is not reported under G5. Only with
  // a container: a storage source (a runtime's named-data map) is never
  // asked about a runtime-owned key.
  void ReportStoredRuntimeOwned(const WeightEntry& e, const NamedDataEntry* named,
                                const std::string& source) {
    if (container_ == nullptr || named == nullptr) return;
    const std::optional<uint64_t> size = container_->SegmentSize(*named);
    const uint64_t segment = named->segment_index;
    report_->Warning("R1",
                     absl::StrCat(Name(e), " is runtime-owned, but its storage key '",
                                  internal::Sv(e.storage_key), "' is stored in the .ptd: ",
                                  size ? absl::StrCat(*size, " bytes") : std::string("a segment"),
                                  " (segment ", segment, ") that the runtime never reads"),
                     At(e, source, file_, segment));
  }

  // X1, G3, and the bytes the view reaches (for G5). A view that failed
  // G1/G2 (`view_ok` false) marks nothing reached, and an entry that failed
  // G4 (`shared_ok` false) is not compared with the segment (G3): each cause
  // is reported once. REQUIRES: a container.
  bool LocateStorage(const WeightEntry& e, const NamedDataEntry* named, const std::string& source,
                     bool view_ok, bool shared_ok, ResolvedWeight* w) {
    w->named = named;
    if (w->named == nullptr) {
      report_->Error("X1", absl::StatusCode::kNotFound,
                     absl::StrCat(Name(e), ": storage key '", internal::Sv(e.storage_key),
                                  "' is not in the .ptd"),
                     At(e, source));
      return false;
    }
    const auto seg_size = container_->SegmentSize(*w->named);
    if (!seg_size) return false;  // C7 was reported by the container.
    bool ok = true;
    if (*seg_size != e.storage_nbytes && shared_ok) {
      report_->Error("G3", kDataLoss,
                     absl::StrCat(Name(e), ": segment ", w->named->segment_index, " behind '",
                                  internal::Sv(e.storage_key), "' holds ", *seg_size,
                                  " bytes, manifest says ", e.storage_nbytes),
                     At(e, source, w->named->segment_index));
      ok = false;
    }
    if (*seg_size != e.storage_nbytes) ok = false;
    if (!container_->segments()[w->named->segment_index].in_bounds) ok = false;
    // A rejected entry reaches nothing: its cause is reported, not a G5 too.
    if (!ok || !view_ok || !shared_ok) return false;
    Reach& r = reach_[w->named->segment_index];
    r.any_view = true;
    if (w->extent && !w->extent->empty() && w->extent->required_nbytes <= *seg_size) {
      r.first = std::min(r.first, w->extent->first_byte);
      r.end = std::max(r.end, w->extent->required_nbytes);
    }
    return ok;
  }

  // X1, G3 against a source that knows only the size behind each key.
  bool CheckStorageSize(const WeightEntry& e, const std::string& source, bool shared_ok) const {
    const std::optional<uint64_t> size = (*storage_size_)(e.storage_key);
    if (!size) {
      report_->Error("X1", absl::StatusCode::kNotFound,
                     absl::StrCat(Name(e), ": storage key '", internal::Sv(e.storage_key),
                                  "' is not in the weight source"),
                     At(e, source));
      return false;
    }
    if (*size != e.storage_nbytes) {
      if (!shared_ok) return false;  // G4 reported the disagreement.
      report_->Error("G3", kDataLoss,
                     absl::StrCat(Name(e), ": the bytes behind '", internal::Sv(e.storage_key),
                                  "' are ", *size, " bytes, manifest says ", e.storage_nbytes),
                     At(e, source));
      return false;
    }
    return true;
  }

  // Per named-data entry: does some manifest entry name its key? An entry
  // whose key the container holds twice (C6) shares the mark of the one a
  // lookup finds: only unmarked entries are looked up again.
  const std::vector<bool>& ReferencedKeys() {
    if (!duplicates_marked_) {
      const auto& named = container_->named_data();
      for (size_t k = 0; k < named.size(); ++k) {
        if (referenced_[k]) continue;
        const NamedDataEntry* found = container_->Find(named[k].key);
        if (found != nullptr && referenced_[Index(found)]) referenced_[k] = true;
      }
      duplicates_marked_ = true;
    }
    return referenced_;
  }

  const Container* container_;
  const WeightSet::StorageSizeFn* storage_size_;
  Report* report_;
  const std::string file_;
  // Per named-data entry of the container: does some manifest entry name
  // its key (G5, X3), and the first entry that did (G4; fqn null: none).
  std::vector<bool> referenced_;
  bool duplicates_marked_ = false;
  std::vector<KeyOwner> key_owners_;
  // G4's first owners of keys not in a container (or without one).
  absl::flat_hash_map<std::string_view, KeyOwner> owners_;
  std::vector<Reach> reach_;
  bool all_keys_indexed_ = false;  // Then FindKey's try needs no index check.
  size_t next_guess_ = 0;          // FindKey's first try.
};

}  // namespace

ViewSpec ResolvedWeight::view() const {
  return ViewSpec{.element_size = *ElementSize(entry->dtype),
                  .storage_offset = entry->storage_offset,
                  .sizes = entry->sizes,
                  .strides = entry->strides};
}

WeightSet WeightSet::Resolve(const Container& container,
                             absl::Span<const SourcedManifest> manifests, Report* report) {
  return ResolveImpl(&container, nullptr, manifests, report);
}

WeightSet WeightSet::CheckWithoutContainer(absl::Span<const SourcedManifest> manifests,
                                           Report* report) {
  return ResolveImpl(nullptr, nullptr, manifests, report);
}

WeightSet WeightSet::ResolveSizes(absl::Span<const SourcedManifest> manifests,
                                  const StorageSizeFn& storage_size, Report* report) {
  return ResolveImpl(nullptr, &storage_size, manifests, report);
}

WeightSet WeightSet::ResolveImpl(const Container* container, const StorageSizeFn* storage_size,
                                 absl::Span<const SourcedManifest> manifests, Report* report) {
  WeightSet set;
  Resolver resolver(container, storage_size, report);
  size_t total = 0;
  for (const SourcedManifest& in : manifests) total += in.manifest.entries.size();
  resolver.Reserve(total);
  for (const SourcedManifest& in : manifests) {
    ResolvedManifest rm{.manifest = &in};
    rm.weights.reserve(in.manifest.entries.size());
    for (const WeightEntry& e : in.manifest.entries) {
      rm.weights.push_back(resolver.ResolveEntry(e, in));
    }
    set.manifests_.push_back(std::move(rm));
  }
  if (container == nullptr) return set;
  resolver.ReportUnreachedBytes();
  if (!manifests.empty()) resolver.ReportOrphans();
  return set;
}

absl::StatusOr<WeightSet> WeightSet::Open(const Container& container,
                                          absl::Span<const SourcedManifest> manifests) {
  Report report;
  WeightSet set = Resolve(container, manifests, &report);
  if (!report.ok()) return report.FirstError();
  return set;
}

}  // namespace ptd
