#include "ptd/manifest.h"

#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"

namespace ptd {

// The decoder's way to NameArena's members that users do not get.
struct internal::NameArenaAccess {
  static std::string_view KeepUnsynchronized(NameArena& arena, std::string_view name) {
    return arena.KeepUnsynchronized(name);
  }
  static void Retain(NameArena& arena, std::shared_ptr<const void> owner) {
    arena.Retain(std::move(owner));
  }
  static void Absorb(NameArena& arena, NameArena&& other) { arena.Absorb(std::move(other)); }
};

namespace {

constexpr absl::StatusCode kDataLoss = absl::StatusCode::kDataLoss;

// Bounds-checked reader. Every read that would pass the end records M2 once
// and fails; callers stop at the first failure.
class Cursor {
 public:
  // Starts reading at `pos`; offsets in messages count from the start.
  Cursor(absl::Span<const uint8_t> bytes, size_t pos, const Where& where, Report* report)
      : bytes_(bytes), pos_(pos), where_(where), report_(report) {}

  size_t pos() const { return pos_; }
  // REQUIRES: pos <= the size of the bytes.
  void Seek(size_t pos) { pos_ = pos; }
  // Reads that follow belong to entry `i`: their `what` is numbered in a
  // message ("entry 7"), built only when a read fails.
  void SetEntry(uint32_t i) { entry_ = i; }
  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  bool Read(T* out, std::string_view what) {
    if (!Need(sizeof(T), what)) return false;
    *out = internal::LoadLE<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return true;
  }

  // `n` little-endian int64 values into `out`, one bounds check for all.
  bool ReadDims(uint32_t n, DimVector* out, std::string_view what) {
    if (!Need(uint64_t{n} * sizeof(int64_t), what)) return false;
    out->resize(n);
    for (uint32_t d = 0; d < n; ++d) {
      (*out)[d] = internal::LoadLE<int64_t>(bytes_.data() + pos_ + d * sizeof(int64_t));
    }
    pos_ += n * sizeof(int64_t);
    return true;
  }

  // Steps over `n` bytes.
  bool Skip(uint64_t n, std::string_view what) {
    if (!Need(n, what)) return false;
    pos_ += n;
    return true;
  }
  // Steps over a length-prefixed string.
  bool SkipString(std::string_view what) {
    uint32_t len;
    return Read(&len, what) && Skip(len, what);
  }

  // A length-prefixed name: copied into `names`, or a view of the bytes
  // when `names` is null.
  bool ReadName(std::string_view* out, NameArena* names, std::string_view what) {
    uint32_t len;
    if (!Read(&len, what)) return false;
    if (!Need(len, what)) return false;
    const std::string_view name(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    *out = names != nullptr ? internal::NameArenaAccess::KeepUnsynchronized(*names, name) : name;
    pos_ += len;
    return true;
  }

  bool ReadString(std::string* out, std::string_view what) {
    uint32_t len;
    if (!Read(&len, what)) return false;
    if (!Need(len, what)) return false;
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return true;
  }

 private:
  bool Need(uint64_t n, std::string_view what) {
    if (n <= remaining()) return true;
    Fail(n, what);
    return false;
  }

  // Kept out of line: every read inlines the check above, not this.
  ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD void Fail(uint64_t n, std::string_view what) {
    report_->Error(
        "M2", kDataLoss,
        absl::StrCat("manifest ends while reading ", internal::Sv(what),
                     entry_ ? absl::StrCat(" ", *entry_) : std::string(), ": needs ", n,
                     " bytes at offset ", pos_, ", ", remaining(), " left of ", bytes_.size()),
        where_);
  }

  absl::Span<const uint8_t> bytes_;
  size_t pos_;
  std::optional<uint32_t> entry_;
  const Where& where_;
  Report* report_;
};

void CheckVariants(const std::vector<Variant>& variants, const Where& where, Report* report) {
  const auto err = [&](size_t i, std::string msg) {
    report->Error("M4", kDataLoss, absl::StrCat("variant ", i, ": ", msg), where);
  };
  size_t fallbacks = 0;
  absl::flat_hash_map<uint32_t, size_t> targets;  // Non-fallback target -> index.
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    if (v.ptx_compute > v.target_sm) {
      err(i, absl::StrCat("ptx_compute ", v.ptx_compute, " exceeds target_sm ", v.target_sm));
    }
    if ((v.flags & ~kVariantFallbackOnly) != 0) {
      err(i, absl::StrCat("flags 0x", absl::Hex(v.flags),
                          " set bits other than bit 0 (fallback_only)"));
    }
    if (v.so_blob_key.empty()) {
      err(i, "so_blob_key is empty");
    } else if (!internal::IsValidUtf8(v.so_blob_key)) {
      err(i, "so_blob_key is not valid UTF-8");
    }
    if (v.target_sm == 0) {
      if (variants.size() != 1) {
        err(i, absl::StrCat("an untargeted variant (target_sm 0) must be the "
                            "only one, but there are ",
                            variants.size()));
      }
      if (v.ptx_compute != 0) {
        err(i,
            absl::StrCat("an untargeted variant has ptx_compute ", v.ptx_compute, ", expected 0"));
      }
      if (v.fallback_only()) err(i, "an untargeted variant is marked fallback_only");
    }
    if (v.fallback_only()) {
      ++fallbacks;
      if (fallbacks == 2) err(i, "more than one fallback_only variant");
      if (v.ptx_compute == 0) err(i, "a fallback_only variant has ptx_compute 0");
    } else {
      if (auto [it, inserted] = targets.emplace(v.target_sm, i); !inserted) {
        err(i, absl::StrCat("target_sm ", v.target_sm, " is already the target of variant ",
                            it->second));
      }
      if (variants.size() > 1 && v.ptx_compute != 0) {
        err(i, absl::StrCat("ptx_compute ", v.ptx_compute, " on a non-fallback variant of a ",
                            variants.size(), "-variant manifest (expected 0)"));
      }
    }
  }
}

// M5 field checks of one entry; returns false if any failed.
bool CheckEntry(const WeightEntry& e, size_t index, const Where& base, Report* report) {
  bool ok = true;
  // The location and the name are built only for a diagnostic: a
  // well-formed entry allocates nothing here.
  const auto err = [&](std::string msg) {
    Where where = base;
    if (!e.fqn.empty()) where.fqn = e.fqn;
    if (!e.storage_key.empty()) where.key = e.storage_key;
    const std::string name = e.fqn.empty()
                                 ? absl::StrCat("entry ", index)
                                 : absl::StrCat("weight '", internal::Escaped(e.fqn), "'");
    report->Error("M5", kDataLoss, absl::StrCat(name, ": ", msg), where);
    ok = false;
  };
  if (e.fqn.empty())
    err("fqn is empty");
  else if (!internal::IsValidUtf8(e.fqn))
    err("fqn is not valid UTF-8");
  if (e.storage_key.empty())
    err("storage_key is empty");
  else if (!internal::IsValidUtf8(e.storage_key))
    err("storage_key is not valid UTF-8");
  if (!ElementSize(e.dtype)) err(absl::StrCat("dtype ", e.dtype, " is not a known ScalarType"));
  if (!IsKnownDeviceType(e.device_type)) {
    err(absl::StrCat("device_type ", e.device_type, " is not 0 (CPU) or 1 (CUDA)"));
  }
  if (e.storage_offset < 0) {
    err(absl::StrCat("storage_offset ", e.storage_offset, " is negative"));
  }
  if (e.sizes.size() != e.strides.size() || e.sizes.size() > kMaxDims) {
    err(absl::StrCat(e.sizes.size(), " sizes and ", e.strides.size(),
                     " strides (need equal counts, at most ", kMaxDims, ")"));
  }
  for (size_t d = 0; d < e.sizes.size(); ++d) {
    if (e.sizes[d] < 0) err(absl::StrCat("sizes[", d, "] is ", e.sizes[d], ", negative"));
  }
  for (size_t d = 0; d < e.strides.size(); ++d) {
    if (e.strides[d] < 0) {
      err(absl::StrCat("strides[", d, "] is ", e.strides[d], ", negative"));
    }
  }
  // U1: a dtype this project loads but upstream's CUDA runtime refuses.
  if (ok && !UpstreamCudaAcceptsDtype(e.dtype)) {
    Where where = base;
    where.fqn = e.fqn;
    where.key = e.storage_key;
    report->Warning("U1",
                    absl::StrCat("weight '", internal::Escaped(e.fqn), "': dtype ",
                                 internal::Sv(ScalarTypeName(e.dtype)), " (", e.dtype,
                                 ") is refused by upstream's CUDA runtime, which loads only ",
                                 internal::Sv(UpstreamCudaDtypeList())),
                    std::move(where));
  }
  return ok;
}

// ETCUDAFQN3 holds one so_blob_key and nothing else of a variant.
absl::Status CheckReleasedVariant(const std::vector<Variant>& variants) {
  if (variants.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an ", internal::Sv(kManifestMagicFqn3),
        " manifest has exactly one untargeted variant, but this manifest has ", variants.size()));
  }
  const Variant& v = variants[0];
  if (v.target_sm != 0 || v.ptx_compute != 0 || v.flags != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an ", internal::Sv(kManifestMagicFqn3),
                     " manifest has one untargeted variant (target_sm 0, "
                     "ptx_compute 0, flags 0), but its variant has target_sm ",
                     v.target_sm, ", ptx_compute ", v.ptx_compute, ", flags ", v.flags));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view NameArena::Keep(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  return KeepUnsynchronized(name);
}

std::string_view NameArena::KeepUnsynchronized(std::string_view name) {
  if (name.empty()) return {};
  if (name.size() > left_) {
    // A long name gets a block of its own; the shared block stays current.
    const size_t bytes = name.size() > kBlockBytes / 4 ? name.size() : kBlockBytes;
    blocks_.push_back(std::make_unique_for_overwrite<char[]>(bytes));
    if (bytes != kBlockBytes) {
      std::memcpy(blocks_.back().get(), name.data(), name.size());
      return {blocks_.back().get(), name.size()};
    }
    next_ = blocks_.back().get();
    left_ = bytes;
  }
  char* at = next_;
  std::memcpy(at, name.data(), name.size());
  next_ += name.size();
  left_ -= name.size();
  return {at, name.size()};
}

void NameArena::Absorb(NameArena&& other) {
  for (auto& block : other.blocks_) blocks_.push_back(std::move(block));
  other.blocks_.clear();
  other.next_ = nullptr;
  other.left_ = 0;
}

void NameArena::Retain(std::shared_ptr<const void> owner) {
  std::lock_guard<std::mutex> lock(mu_);
  owners_.push_back(std::move(owner));
}

std::string_view Manifest::KeepName(std::string_view name) {
  if (names == nullptr) names = std::make_shared<NameArena>();
  return names->Keep(name);
}

absl::Status CheckWeightEntry(const WeightEntry& entry) {
  Report report;
  CheckEntry(entry, 0, Where{}, &report);
  if (!report.ok()) {
    return absl::InvalidArgumentError(report.errors().front().message);
  }
  return absl::OkStatus();
}

namespace {

// "'ETCUDAFQN0' <conjunction> 'ETCUDAFQN3'": the layouts this reader reads.
std::string ReadFormats(std::string_view conjunction) {
  return absl::StrCat("'", internal::Sv(kManifestMagicFqn0), "' ", internal::Sv(conjunction), " '",
                      internal::Sv(kManifestMagicFqn3), "'");
}

// M1 and the M2 length check of the magic: the layout, or nullopt (reported).
std::optional<ManifestFormat> DecodeMagic(absl::Span<const uint8_t> bytes, const Where& where,
                                          Report* report) {
  if (bytes.size() < kManifestMagicFqn0.size()) {
    report->Error("M2", kDataLoss,
                  absl::StrCat("manifest is ", bytes.size(), " bytes, shorter than its ",
                               kManifestMagicFqn0.size(), "-byte magic"),
                  where);
    return std::nullopt;
  }
  const std::string_view magic(reinterpret_cast<const char*>(bytes.data()),
                               kManifestMagicFqn0.size());
  if (magic == kManifestMagicFqn0) return ManifestFormat::kFqn0;
  if (magic == kManifestMagicFqn3) return ManifestFormat::kFqn3;
  const bool transitional = magic.substr(0, kManifestMagicPrefix.size()) == kManifestMagicPrefix &&
                            magic[kManifestMagicPrefix.size()] >= '1' &&
                            magic[kManifestMagicPrefix.size()] <= '9';
  if (transitional) {
    report->Error("M1", absl::StatusCode::kUnimplemented,
                  absl::StrCat("manifest version '", internal::Sv(magic),
                               "' is not supported by this reader "
                               "(transitional or newer) (it reads ",
                               ReadFormats("and"), ")"),
                  where);
  } else {
    report->Error("M1", kDataLoss,
                  absl::StrCat("bad manifest magic '", internal::Escaped(magic), "', expected ",
                               ReadFormats("or")),
                  where);
  }
  return std::nullopt;
}

// ETCUDAFQN0's variant list, then M4. False when the bytes cannot be framed.
bool DecodeVariants(Cursor& in, Manifest* m, const Where& where, Report* report) {
  uint32_t num_variants;
  if (!in.Read(&num_variants, "num_variants")) return false;
  if (num_variants < 1 || num_variants > kMaxVariants) {
    report->Error("M4", kDataLoss,
                  absl::StrCat("num_variants is ", num_variants, ", outside 1..", kMaxVariants),
                  where);
    if (num_variants > kMaxVariants) return false;  // Untrustworthy.
  }
  m->variants.reserve(num_variants);
  for (uint32_t i = 0; i < num_variants; ++i) {
    Variant v;
    const std::string what = absl::StrCat("variant ", i);
    if (!in.Read(&v.target_sm, what) || !in.Read(&v.ptx_compute, what) ||
        !in.Read(&v.flags, what) || !in.ReadString(&v.so_blob_key, what)) {
      return false;
    }
    m->variants.push_back(std::move(v));
  }
  CheckVariants(m->variants, where, report);
  return true;
}

// ETCUDAFQN3's single so_blob_key, read as one untargeted variant, then M4.
bool DecodeReleasedVariant(Cursor& in, Manifest* m, const Where& where, Report* report) {
  Variant v;  // target_sm 0, ptx_compute 0, flags 0.
  if (!in.ReadString(&v.so_blob_key, "so_blob_key")) return false;
  m->variants.push_back(std::move(v));
  CheckVariants(m->variants, where, report);
  return true;
}

// M6's set: entries by position (4 bytes a slot), hashed by the fqn hashes
// the decoder computed, so inserting reads a name only to compare two that
// hash alike.
struct FqnHash {
  // The hash of `fqn`: 0 for an empty fqn (M5's, never in the set), never 0
  // for another.
  static size_t Of(std::string_view fqn) {
    if (fqn.empty()) return 0;
    const size_t h = absl::Hash<std::string_view>{}(fqn);
    return h == 0 ? 1 : h;
  }
  const std::vector<size_t>* hashes;
  size_t operator()(uint32_t i) const { return (*hashes)[i]; }
};
struct FqnEq {
  const std::vector<WeightEntry>* entries;
  bool operator()(uint32_t a, uint32_t b) const { return (*entries)[a].fqn == (*entries)[b].fqn; }
};

// Entry `i` at the cursor into `e` (M5), and the hash of its fqn into
// `fqn_hash` (for M6, computed here while the name is in cache and on
// whichever thread decodes it). False when the bytes cannot be framed (the
// error is reported).
bool DecodeEntry(Cursor& in, uint32_t i, WeightEntry& e, size_t& fqn_hash, NameArena* names,
                 const Where& where, Report* report) {
  in.SetEntry(i);
  constexpr std::string_view what = "entry";
  uint32_t ndim;
  if (!in.ReadName(&e.fqn, names, what) || !in.ReadName(&e.storage_key, names, what) ||
      !in.Read(&e.storage_nbytes, what) || !in.Read(&e.dtype, what) ||
      !in.Read(&e.device_type, what) || !in.Read(&e.storage_offset, what) ||
      !in.Read(&ndim, what)) {
    return false;
  }
  if (ndim > kMaxDims) {
    report->Error("M5", kDataLoss,
                  absl::StrCat("entry ", i, " ('", internal::Escaped(e.fqn), "'): ndim is ", ndim,
                               ", over the limit ", kMaxDims),
                  Where{.file = where.file, .fqn = std::string(e.fqn), .source = where.source});
    return false;  // The rest of the bytes cannot be framed.
  }
  if (!in.ReadDims(ndim, &e.sizes, what) || !in.ReadDims(ndim, &e.strides, what)) {
    return false;
  }
  e.well_formed = CheckEntry(e, i, where, report);
  fqn_hash = FqnHash::Of(e.fqn);
  return true;
}

// From this many entries the second half is decoded on a thread of its own.
constexpr uint32_t kParallelDecodeEntries = 16384;

// The offset of entry `count` when the `count` entries from the cursor's
// position frame (what DecodeEntry reads, stepped over); nullopt when they
// do not (the start-to-end decode then reports where).
std::optional<size_t> SkipEntries(absl::Span<const uint8_t> bytes, size_t pos, uint32_t count,
                                  const Where& where) {
  Report unused;  // Only a failure writes here, and it is decoded again.
  Cursor in(bytes, pos, where, &unused);
  constexpr std::string_view what = "entry";
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t ndim;
    if (!in.SkipString(what) || !in.SkipString(what) ||
        !in.Skip(sizeof(WeightEntry::storage_nbytes) + sizeof(WeightEntry::dtype) +
                     sizeof(WeightEntry::device_type) + sizeof(WeightEntry::storage_offset),
                 what) ||
        !in.Read(&ndim, what) || ndim > kMaxDims ||
        !in.Skip(uint64_t{ndim} * 2 * sizeof(int64_t), what)) {
      return std::nullopt;
    }
  }
  return in.pos();
}

// The entry list (M5 per entry). False when the bytes cannot be framed.
// A large list is decoded in two halves at once, each into its own report,
// merged in order: the diagnostics and the entries are those of decoding
// from start to end (the second half starts where its first entry is found
// by skipping the first; a list whose first half does not frame is decoded
// from start to end, which reports where). Names are copied into `names`,
// or view `bytes` when it is null.
bool DecodeEntries(Cursor& in, absl::Span<const uint8_t> bytes, Manifest* m, NameArena* names,
                   std::vector<size_t>* fqn_hashes, const Where& where, Report* report) {
  uint32_t num_entries;
  if (!in.Read(&num_entries, "num_entries")) return false;
  if (num_entries > kMaxManifestEntries) {
    report->Error(
        "M5", kDataLoss,
        absl::StrCat("num_entries is ", num_entries, ", over the limit ", kMaxManifestEntries),
        where);
    return false;
  }
  // Each entry takes at least 40 bytes; do not reserve more than could fit.
  constexpr size_t kMinEntryBytes = 4 + 4 + 8 + 4 + 4 + 8 + 4;
  const size_t fit = in.remaining() / kMinEntryBytes;
  const uint32_t half = num_entries / 2;
  const std::optional<size_t> second = num_entries >= kParallelDecodeEntries &&
                                               num_entries <= fit &&
                                               std::thread::hardware_concurrency() > 1
                                           ? SkipEntries(bytes, in.pos(), half, where)
                                           : std::nullopt;
  if (!second) {
    m->entries.reserve(std::min<size_t>(num_entries, fit));
    fqn_hashes->reserve(m->entries.capacity());
    for (uint32_t i = 0; i < num_entries; ++i) {
      // Decoded in place; on a framing failure the manifest is dropped whole.
      if (!DecodeEntry(in, i, m->entries.emplace_back(), fqn_hashes->emplace_back(), names, where,
                       report)) {
        return false;
      }
    }
    return true;
  }
  m->entries.resize(num_entries);
  fqn_hashes->resize(num_entries);
  Report second_report;
  NameArena second_names;  // The second half's, absorbed after the join.
  bool second_ok = true;
  size_t end = 0;
  std::exception_ptr thrown;
  {
    std::jthread worker([&] {
      try {
        Cursor tail(bytes, *second, where, &second_report);
        for (uint32_t i = half; i < num_entries && second_ok; ++i) {
          second_ok =
              DecodeEntry(tail, i, m->entries[i], (*fqn_hashes)[i],
                          names != nullptr ? &second_names : nullptr, where, &second_report);
        }
        end = tail.pos();
      } catch (...) {
        thrown = std::current_exception();
      }
    });
    for (uint32_t i = 0; i < half; ++i) {
      // The first half frames (SkipEntries): this never fails.
      if (!DecodeEntry(in, i, m->entries[i], (*fqn_hashes)[i], names, where, report)) {
        return false;
      }
    }
  }
  if (thrown) std::rethrow_exception(thrown);
  if (names != nullptr) internal::NameArenaAccess::Absorb(*names, std::move(second_names));
  report->Merge(std::move(second_report));
  if (!second_ok) return false;
  in.Seek(end);
  return true;
}

// M6, after decoding. `fqn_hashes[i]` is the hash of entry i's fqn.
void CheckUniqueFqns(Manifest* m, const std::vector<size_t>& fqn_hashes, const Where& where,
                     Report* report) {
  absl::flat_hash_set<uint32_t, FqnHash, FqnEq> seen_fqns(0, FqnHash{&fqn_hashes},
                                                          FqnEq{&m->entries});
  seen_fqns.reserve(m->entries.size());
  for (uint32_t i = 0; i < m->entries.size(); ++i) {
    if (fqn_hashes[i] == 0) continue;  // An empty fqn (M5).
    auto [it, inserted] = seen_fqns.insert(i);
    if (!inserted) {
      WeightEntry& e = m->entries[i];
      report->Error("M6", kDataLoss,
                    absl::StrCat("weight '", internal::Sv(e.fqn), "' appears twice (entries ", *it,
                                 " and ", i, ")"),
                    Where{.file = where.file,
                          .key = std::string(e.storage_key),
                          .fqn = std::string(e.fqn),
                          .source = where.source});
      e.well_formed = false;
    }
  }
}

}  // namespace

std::string_view ManifestFormatName(ManifestFormat format) {
  return format == ManifestFormat::kFqn3 ? kManifestMagicFqn3 : kManifestMagicFqn0;
}

std::optional<Manifest> DecodeManifest(absl::Span<const uint8_t> bytes, const Where& where,
                                       Report* report) {
  return DecodeManifest(bytes, nullptr, where, report);
}

std::optional<Manifest> DecodeManifest(absl::Span<const uint8_t> bytes,
                                       std::shared_ptr<const void> bytes_owner, const Where& where,
                                       Report* report) {
  const std::optional<ManifestFormat> format = DecodeMagic(bytes, where, report);
  if (!format) return std::nullopt;
  Cursor in(bytes, kManifestMagicFqn0.size(), where, report);
  Manifest m;
  m.format = *format;
  m.names = std::make_shared<NameArena>();
  const bool in_place = bytes_owner != nullptr;
  if (in_place) internal::NameArenaAccess::Retain(*m.names, std::move(bytes_owner));
  const bool framed = *format == ManifestFormat::kFqn3
                          ? DecodeReleasedVariant(in, &m, where, report)
                          : DecodeVariants(in, &m, where, report);
  std::vector<size_t> fqn_hashes;  // By entry: M6's.
  if (!framed || !DecodeEntries(in, bytes, &m, in_place ? nullptr : m.names.get(), &fqn_hashes,
                                where, report)) {
    return std::nullopt;
  }
  if (in.remaining() != 0) {
    report->Error("M3", kDataLoss,
                  absl::StrCat(in.remaining(),
                               " trailing bytes after the last "
                               "entry, at offset ",
                               in.pos(), " of ", bytes.size()),
                  where);
  }
  CheckUniqueFqns(&m, fqn_hashes, where, report);
  return m;
}

absl::StatusOr<Manifest> ParseManifest(absl::Span<const uint8_t> bytes, std::string_view name) {
  Report report;
  auto m = DecodeManifest(bytes, Where{.file = std::string(name)}, &report);
  if (!report.ok()) return report.FirstError();
  return std::move(*m);
}

absl::StatusOr<std::vector<uint8_t>> EncodeManifest(const Manifest& manifest) {
  const std::string_view magic = ManifestFormatName(manifest.format);
  std::vector<uint8_t> out(magic.begin(), magic.end());
  const auto u32 = [&](uint32_t v) {
    uint8_t b[4];
    internal::StoreLE(b, v);
    out.insert(out.end(), b, b + 4);
  };
  const auto u64 = [&](uint64_t v) {
    uint8_t b[8];
    internal::StoreLE(b, v);
    out.insert(out.end(), b, b + 8);
  };
  const auto str = [&](std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  };
  if (manifest.variants.size() > kMaxVariants || manifest.entries.size() > kMaxManifestEntries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest has ", manifest.variants.size(), " variants and ", manifest.entries.size(),
        " entries; limits are ", kMaxVariants, " and ", kMaxManifestEntries));
  }
  for (const WeightEntry& e : manifest.entries) {
    PTD_RETURN_IF_ERROR(CheckWeightEntry(e));  // The rank must frame the bytes.
  }
  if (manifest.format == ManifestFormat::kFqn3) {
    PTD_RETURN_IF_ERROR(CheckReleasedVariant(manifest.variants));
    str(manifest.variants[0].so_blob_key);
  } else {
    u32(static_cast<uint32_t>(manifest.variants.size()));
    for (const Variant& v : manifest.variants) {
      u32(v.target_sm);
      u32(v.ptx_compute);
      u32(v.flags);
      str(v.so_blob_key);
    }
  }
  u32(static_cast<uint32_t>(manifest.entries.size()));
  for (const WeightEntry& e : manifest.entries) {
    str(e.fqn);
    str(e.storage_key);
    u64(e.storage_nbytes);
    u32(static_cast<uint32_t>(e.dtype));
    u32(static_cast<uint32_t>(e.device_type));
    u64(static_cast<uint64_t>(e.storage_offset));
    u32(static_cast<uint32_t>(e.sizes.size()));
    for (int64_t s : e.sizes) u64(static_cast<uint64_t>(s));
    for (int64_t s : e.strides) u64(static_cast<uint64_t>(s));
  }
  // Never write what the decoder rejects.
  Report report;
  DecodeManifest(out, Where{.file = "manifest being encoded"}, &report);
  if (!report.ok()) {
    return absl::InvalidArgumentError(report.errors().front().message);
  }
  return out;
}

absl::StatusOr<VariantChoice> SelectVariant(absl::Span<const Variant> variants, uint32_t sm) {
  if (variants.size() == 1 && variants[0].target_sm == 0) {
    return VariantChoice{.index = 0, .via_ptx = false};
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!variants[i].fallback_only() && variants[i].target_sm == sm) {
      return VariantChoice{.index = i, .via_ptx = false};
    }
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    if (v.ptx_compute != 0 && v.ptx_compute <= sm && (v.fallback_only() || variants.size() == 1)) {
      return VariantChoice{.index = i, .via_ptx = true};
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no variant fits sm ", sm, " (", variants.size(), " variants)"));
}

namespace {

std::string_view DeviceKeyName(int32_t device_type) {
  return device_type == kDeviceTypeCpu ? "cpu" : "cuda";
}

}  // namespace

std::string StorageKeyFor(std::string_view fqn, int32_t device_type, std::string_view so_blob_key) {
  const std::string_view device = DeviceKeyName(device_type);
  if (absl::StartsWith(internal::Sv(fqn), internal::Sv(kLibraryConstantPrefix))) {
    return absl::StrCat(internal::Sv(kCudaWeightKeyPrefix), internal::Sv(device), ":",
                        internal::Sv(so_blob_key), ":", internal::Sv(fqn));
  }
  return absl::StrCat(internal::Sv(kCudaWeightKeyPrefix), internal::Sv(device), ":",
                      internal::Sv(fqn));
}

bool IsLibraryConstantKeyOf(std::string_view key, std::string_view so_blob_key) {
  for (const int32_t device : {kDeviceTypeCuda, kDeviceTypeCpu}) {
    const std::string prefix =
        absl::StrCat(internal::Sv(kCudaWeightKeyPrefix), internal::Sv(DeviceKeyName(device)), ":",
                     internal::Sv(so_blob_key), ":");
    if (absl::StartsWith(internal::Sv(key), prefix)) return true;
  }
  return false;
}

}  // namespace ptd
