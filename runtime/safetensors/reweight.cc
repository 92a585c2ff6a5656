// Reweight: the .ptd a program expects, built from a safetensors checkpoint
// (docs/SPEC.md section 7, rules S8-S10).
//
// The plan: every storage the program's manifests reference (in order of
// first reference), with the views on it and the checkpoint tensor behind
// each (S8), or the base's bytes (S10). A storage is then built window by
// window (at most about a third of the memory budget each): every view's
// tensor elements are scattered into the window under a coverage bitmap
// that catches shared bytes that disagree (S9), and the bytes no view covers
// come from the base, else zero. The output keeps the base's layout byte for
// byte when it fits, else is laid out as upstream's collector lays it out;
// either way the finished temporary file is verified under every rule before
// it is renamed into place.
#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "ptd/checkpoint.h"
#include "ptd/container.h"
#include "ptd/ptd_writer.h"
#include "ptd/rules.h"
#include "ptd/safetensors.h"
#include "ptd/scalar_type.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/ptd/ptd_layout.h"

namespace ptd {
namespace {

using internal::Sv;

constexpr uint64_t kMaxManifestFileBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxReadChunk = uint64_t{1} << 20;

bool IsFloating(int32_t t) {
  return t == 5 || t == 6 || t == 7 || t == 15 || (t >= 23 && t <= 26) || (t >= 8 && t <= 10);
}

std::string ShapeString(absl::Span<const uint64_t> s) {
  return absl::StrCat("[", absl::StrJoin(s, ","), "]");
}

std::string Rename(const std::string& name,
                   const std::vector<std::pair<std::string, std::string>>& rules) {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& r : rules) {
    if (name.compare(0, r.first.size(), r.first) == 0 &&
        (best == nullptr || r.first.size() > best->first.size())) {
      best = &r;
    }
  }
  if (best == nullptr) return name;
  return best->second + name.substr(best->first.size());
}

// The program's manifests, decoded and checked on their own (M*, P1, P2,
// G1, G2, G4).
struct ProgramManifests {
  std::unique_ptr<Program> program;
  std::vector<SourcedManifest> manifests;
  std::optional<WeightSet> weights;
};

absl::StatusOr<ProgramManifests> LoadProgramManifests(const BundlePaths& paths) {
  ProgramManifests out;
  if (paths.manifest) {
    PTD_ASSIGN_OR_RETURN(std::shared_ptr<const FileSource> src,
                         OpenFile(*paths.manifest, /*use_mmap=*/false));
    if (src->size() > kMaxManifestFileBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(src->name(), ": the manifest is ", src->size(), " bytes, over 1 GiB"));
    }
    PTD_ASSIGN_OR_RETURN(Bytes bytes, ReadBytes(*src, 0, src->size()));
    PTD_ASSIGN_OR_RETURN(Manifest m, ParseManifest(bytes.span(), src->name()));
    out.manifests.push_back({std::string(kStandaloneManifestSource), std::move(m), src->name()});
  }
  if (paths.pte) {
    PTD_ASSIGN_OR_RETURN(std::shared_ptr<const FileSource> src,
                         OpenFile(*paths.pte, /*use_mmap=*/false));
    PTD_ASSIGN_OR_RETURN(out.program, Program::Open(src));
    for (const CudaDelegate& d : out.program->cuda_delegates()) {
      if (!d.is_manifest) continue;
      Report report;
      auto m = DecodeManifest(d.payload.span(),
                              Where{.file = out.program->path(), .source = d.source}, &report);
      PTD_RETURN_IF_ERROR(report.FirstError());
      out.manifests.push_back({d.source, std::move(*m), out.program->path()});
    }
  }
  if (!out.manifests.empty()) {
    Report report;
    out.weights = WeightSet::CheckWithoutContainer(out.manifests, &report);
    PTD_RETURN_IF_ERROR(report.FirstError());
  }
  return out;
}

// One view on a storage and the checkpoint tensor that fills it (none: the
// base keeps it).
struct ViewUse {
  std::string fqn;     // The key in key mode.
  std::string source;  // The manifest source; empty in key mode.
  uint32_t element_size = 1;
  int64_t offset = 0;
  DimVector sizes;
  DimVector strides;
  ViewExtent extent;
  bool contiguous = false;
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
  ViewSpec spec() const { return ViewSpec{element_size, offset, sizes, strides}; }
};

struct Storage {
  std::string key;
  uint64_t nbytes = 0;
  std::vector<ViewUse> views;
  const NamedDataEntry* base = nullptr;  // The base's bytes, same size.
};

// Calls `f(index, byte_offset)` for each element of `v` in row-major order,
// until it returns false.
template <typename F>
void ForEachElement(const ViewUse& v, F f) {
  const size_t nd = v.sizes.size();
  if (v.extent.numel == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t elem = v.offset;
  for (uint64_t k = 0; k < v.extent.numel; ++k) {
    if (!f(k, static_cast<uint64_t>(elem) * v.element_size)) return;
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < v.sizes[d]) {
        elem += v.strides[d];
        break;
      }
      elem -= v.strides[d] * (v.sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

class Builder {
 public:
  Builder(const ReweightOptions& options, const Container* base, ReweightResult* result)
      : base_(base), result_(result) {
    const uint64_t budget = std::max<uint64_t>(options.memory_budget, 64 << 10);
    read_chunk_ = std::min<uint64_t>(kMaxReadChunk, budget / 8);
    window_ = std::max<uint64_t>(4096, (budget - read_chunk_) * 8 / 17);
  }

  uint64_t window() const { return window_; }

  // Builds `s` window by window, calling `sink` with each in order. Zero
  // fills are recorded when `record`.
  absl::Status Build(const Storage& s, bool record,
                     const std::function<absl::Status(absl::Span<const uint8_t>)>& sink) {
    for (uint64_t w0 = 0; w0 < s.nbytes; w0 += window_) {
      const uint64_t len = std::min(window_, s.nbytes - w0);
      buf_.assign(len, 0);
      covered_.assign((len + 63) / 64, 0);
      for (size_t vi = 0; vi < s.views.size(); ++vi) {
        const ViewUse& u = s.views[vi];
        if (u.tensor == nullptr || u.extent.empty()) continue;
        if (u.extent.required_nbytes <= w0 || u.extent.first_byte >= w0 + len) continue;
        PTD_RETURN_IF_ERROR(Scatter(s, vi, w0, len));
      }
      PTD_RETURN_IF_ERROR(FillUncovered(s, w0, len, record));
      PTD_RETURN_IF_ERROR(sink(buf_));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Hash(const Storage& s) {
    Sha256 sha;
    PTD_RETURN_IF_ERROR(Build(s, false, [&](absl::Span<const uint8_t> b) {
      sha.Update(b);
      return absl::OkStatus();
    }));
    return sha.HexDigest();
  }

 private:
  bool IsCovered(uint64_t i) const { return (covered_[i / 64] >> (i % 64)) & 1; }
  void Cover(uint64_t i) { covered_[i / 64] |= uint64_t{1} << (i % 64); }

  // Places tensor bytes `data` (starting at tensor byte `tensor_byte`) at
  // storage byte `at`, clipped to the window [w0, w0 + len).
  absl::Status Place(const Storage& s, size_t vi, uint64_t w0, uint64_t len, uint64_t at,
                     absl::Span<const uint8_t> data, uint64_t tensor_byte) {
    uint64_t begin = std::max(at, w0);
    const uint64_t end = std::min(at + data.size(), w0 + len);
    while (begin < end) {
      const uint64_t i = begin - w0;
      const uint8_t v = data[begin - at];
      // A whole bitmap word free: copy 64 bytes at once.
      if (i % 64 == 0 && end - begin >= 64 && covered_[i / 64] == 0) {
        std::memcpy(buf_.data() + i, data.data() + (begin - at), 64);
        covered_[i / 64] = ~uint64_t{0};
        begin += 64;
        continue;
      }
      if (IsCovered(i)) {
        if (buf_[i] != v) return Conflict(s, vi, begin, (tensor_byte + begin - at), v, buf_[i]);
      } else {
        buf_[i] = v;
        Cover(i);
      }
      ++begin;
    }
    return absl::OkStatus();
  }

  absl::Status Scatter(const Storage& s, size_t vi, uint64_t w0, uint64_t len) {
    const ViewUse& u = s.views[vi];
    const uint64_t e = u.element_size;
    const uint64_t chunk = std::max<uint64_t>(e, read_chunk_ / e * e);
    read_.resize(chunk);
    if (u.contiguous) {
      const uint64_t fb = u.extent.first_byte;
      const uint64_t first = w0 > fb ? (w0 - fb) / e : 0;
      const uint64_t wend = w0 + len;
      const uint64_t last =
          wend > fb ? std::min<uint64_t>(u.extent.numel, (wend - fb + e - 1) / e) : 0;
      for (uint64_t b = first * e; b < last * e;) {
        const uint64_t n = std::min(chunk, last * e - b);
        PTD_RETURN_IF_ERROR(u.file->Read(*u.tensor, b, absl::MakeSpan(read_.data(), n)));
        PTD_RETURN_IF_ERROR(Place(s, vi, w0, len, fb + b, absl::MakeConstSpan(read_.data(), n), b));
        b += n;
      }
      return absl::OkStatus();
    }
    // Any other view (transposed, strided, broadcast): only the elements
    // whose index along the largest-stride dim D can reach the window, in
    // row-major order. They form runs of the tensor, each read on its own,
    // so a window costs about its own bytes, not the whole tensor's.
    const size_t nd = u.sizes.size();
    size_t dim = nd;
    for (size_t d = 0; d < nd; ++d) {
      if (u.sizes[d] > 1 && (dim == nd || u.strides[d] > u.strides[dim])) dim = d;
    }
    std::vector<int64_t> lo(nd, 0), hi(u.sizes.begin(), u.sizes.end());
    if (dim != nd) {
      uint64_t rest = e;  // Bytes the other dims span past an element's start.
      for (size_t d = 0; d < nd; ++d) {
        if (d != dim) rest += static_cast<uint64_t>(u.strides[d] * (u.sizes[d] - 1)) * e;
      }
      const uint64_t base = static_cast<uint64_t>(u.offset) * e;
      const uint64_t step = static_cast<uint64_t>(u.strides[dim]) * e;
      const uint64_t wend = w0 + len;
      uint64_t a = 0, b = static_cast<uint64_t>(u.sizes[dim]);
      if (step == 0) {
        if (base + rest <= w0 || base >= wend) return absl::OkStatus();
      } else {
        // base + i * step + rest > w0 and base + i * step < wend.
        if (base + rest <= w0) a = (w0 - base - rest) / step + 1;
        b = base >= wend ? 0 : std::min(b, (wend - 1 - base) / step + 1);
      }
      if (a >= b) return absl::OkStatus();
      lo[dim] = static_cast<int64_t>(a);
      hi[dim] = static_cast<int64_t>(b);
    }
    // Row-major strides of the tensor, in elements.
    std::vector<uint64_t> rm(nd, 1);
    for (size_t d = nd; d-- > 1;) rm[d - 1] = rm[d] * static_cast<uint64_t>(u.sizes[d]);
    std::vector<int64_t> idx(lo);
    uint64_t k = 0;
    int64_t elem = u.offset;
    for (size_t d = 0; d < nd; ++d) {
      k += static_cast<uint64_t>(idx[d]) * rm[d];
      elem += idx[d] * u.strides[d];
    }
    uint64_t have_begin = 0, have_end = 0;
    while (true) {
      const uint64_t at = static_cast<uint64_t>(elem) * e;
      if (at + e > w0 && at < w0 + len) {
        const uint64_t tb = k * e;
        if (tb < have_begin || tb + e > have_end) {
          // To the end of this run of consecutive tensor elements.
          uint64_t run_end = k + 1;
          if (dim != nd) {
            const uint64_t inner = rm[dim];
            run_end = k - k % inner + static_cast<uint64_t>(hi[dim] - idx[dim]) * inner;
          }
          have_begin = tb;
          have_end = std::min(run_end * e, tb + chunk);
          PTD_RETURN_IF_ERROR(u.file->Read(*u.tensor, have_begin,
                                           absl::MakeSpan(read_.data(), have_end - have_begin)));
        }
        PTD_RETURN_IF_ERROR(Place(s, vi, w0, len, at,
                                  absl::MakeConstSpan(read_.data() + (tb - have_begin), e), tb));
      }
      size_t d = nd;
      while (d-- > 0) {
        if (++idx[d] < hi[d]) {
          k += rm[d];
          elem += u.strides[d];
          break;
        }
        const int64_t back = hi[d] - 1 - lo[d];
        k -= static_cast<uint64_t>(back) * rm[d];
        elem -= back * u.strides[d];
        idx[d] = lo[d];
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    return absl::OkStatus();
  }

  // S9: names both fqns (the one that wrote byte `at` first) and elements.
  absl::Status Conflict(const Storage& s, size_t vi, uint64_t at, uint64_t tensor_byte,
                        uint8_t value, uint8_t previous) {
    const ViewUse& u = s.views[vi];
    const uint64_t elem = tensor_byte / u.element_size;
    for (size_t vj = 0; vj <= vi; ++vj) {
      const ViewUse& p = s.views[vj];
      if (p.tensor == nullptr) continue;
      std::optional<uint64_t> found;
      ForEachElement(p, [&](uint64_t k, uint64_t b) {
        if (vj == vi && k >= elem) return false;
        if (b <= at && at < b + p.element_size) {
          found = k;
          return false;
        }
        return true;
      });
      if (!found) continue;
      if (vj == vi) {
        return WithRule(
            absl::InvalidArgumentError(absl::StrFormat(
                "%s: weight '%s' views byte %d of storage '%s' twice (an overlapping or "
                "broadcast view) but checkpoint tensor '%s' differs there: element %d holds "
                "0x%02x, element %d holds 0x%02x (S9)",
                u.file->path(), u.fqn, at, s.key, u.tensor->name, *found, previous, elem, value)),
            "S9");
      }
      return WithRule(
          absl::InvalidArgumentError(absl::StrFormat(
              "%s: weights '%s' and '%s' share byte %d of storage '%s' but their checkpoint "
              "tensors differ there: '%s' element %d holds 0x%02x, '%s' element %d holds 0x%02x "
              "(S9)",
              u.file->path(), p.fqn, u.fqn, at, s.key, p.fqn, *found, previous, u.fqn, elem,
              value)),
          "S9");
    }
    return WithRule(
        absl::InvalidArgumentError(absl::StrFormat(
            "%s: weight '%s' disagrees with another view at byte %d of storage '%s' (element %d) "
            "(S9)",
            u.file->path(), u.fqn, at, s.key, elem)),
        "S9");
  }

  absl::Status FillUncovered(const Storage& s, uint64_t w0, uint64_t len, bool record) {
    bool all = true;
    for (uint64_t i = 0; i < len && all; i += 64) {
      const uint64_t bits = std::min<uint64_t>(64, len - i);
      const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
      all = (covered_[i / 64] & mask) == mask;
    }
    if (all) return absl::OkStatus();
    if (s.base != nullptr) {
      base_buf_.resize(len);
      PTD_RETURN_IF_ERROR(base_->source().ReadAt(
          base_->SegmentFileOffset(s.base->segment_index) + w0, absl::MakeSpan(base_buf_)));
      for (uint64_t i = 0; i < len; ++i) {
        if (!IsCovered(i)) buf_[i] = base_buf_[i];
      }
      return absl::OkStatus();
    }
    if (!record) return absl::OkStatus();
    for (uint64_t i = 0; i < len;) {
      if (IsCovered(i)) {
        ++i;
        continue;
      }
      uint64_t j = i;
      while (j < len && !IsCovered(j)) ++j;
      std::vector<ZeroFill>& z = result_->zero_filled;
      if (!z.empty() && z.back().key == s.key && z.back().offset + z.back().nbytes == w0 + i) {
        z.back().nbytes += j - i;
      } else {
        z.push_back(ZeroFill{.key = s.key, .offset = w0 + i, .nbytes = j - i});
      }
      result_->zero_filled_bytes += j - i;
      i = j;
    }
    return absl::OkStatus();
  }

  const Container* base_;
  ReweightResult* result_;
  uint64_t read_chunk_ = 0;
  uint64_t window_ = 0;
  std::vector<uint8_t> buf_;
  std::vector<uint64_t> covered_;
  std::vector<uint8_t> read_;
  std::vector<uint8_t> base_buf_;
};

absl::Status CopyRange(const FileSource& src, uint64_t offset, uint64_t n,
                       std::vector<uint8_t>& buf, const WriteFn& write) {
  while (n > 0) {
    buf.resize(std::min<uint64_t>(n, kMaxReadChunk));
    PTD_RETURN_IF_ERROR(src.ReadAt(offset, absl::MakeSpan(buf)));
    PTD_RETURN_IF_ERROR(write(buf));
    offset += buf.size();
    n -= buf.size();
  }
  return absl::OkStatus();
}

// An entry of the collector's layout: a storage being built, or a base key.
struct OutEntry {
  std::string key;
  const Storage* storage = nullptr;
  const NamedDataEntry* base = nullptr;  // When storage is null.
  uint64_t size = 0;
  const TensorLayout* layout = nullptr;
  uint32_t segment = 0;
};

// A checkpoint tensor under its new name, and whether a weight uses it.
struct RenamedTensor {
  SafetensorsCheckpoint::TensorRef ref;
  bool used = false;
};

// One reweighting, step by step: name the checkpoint's tensors, plan the
// storages (S8, S10), decide the layout, write, report. The steps share the
// state below; each is called once, in that order (MakeLayout at most twice).
class Reweighter {
 public:
  Reweighter(const std::string& checkpoint, const BundlePaths& program, const std::string& out,
             const ReweightOptions& options, const Container* base, ReweightResult* result)
      : checkpoint_(checkpoint),
        program_(program),
        out_(out),
        options_(options),
        base_(base),
        result_(*result),
        builder_(options, base, result) {}

  absl::Status NameTensors(const SafetensorsCheckpoint& ckpt);
  absl::Status PlanWeights(const WeightSet& weights);
  absl::Status PlanKeys();
  void ReportUnused();
  absl::Status DecideLayout();
  absl::Status Write();
  void ReportZeroFills();

 private:
  const NamedDataEntry* BaseEntry(std::string_view key, uint64_t nbytes) const;
  Storage& StorageFor(std::string_view key, uint64_t nbytes);
  absl::Status Attach(Storage& s, ViewUse u, int32_t dtype, const std::string& where);
  absl::Status KeepFromBase(Storage& s, ViewUse u, const std::string& where);
  absl::StatusOr<bool> BaseLayoutFits();
  void CollectEntries();
  absl::Status AssignSegments(bool exact);
  absl::Status MakeLayout(bool exact);
  absl::Status Produce(const WriteFn& write);
  absl::Status ProduceInBase(const WriteFn& write);
  absl::Status ProduceCollected(const WriteFn& write);
  absl::Status Check(const std::string& temp) const;

  const std::string& checkpoint_;
  const BundlePaths& program_;
  const std::string& out_;
  const ReweightOptions& options_;
  const Container* base_;  // Null: none given.
  ReweightResult& result_;
  Builder builder_;

  // The checkpoint's tensors under their new names, and the names in order.
  absl::flat_hash_map<std::string, RenamedTensor> by_name_;
  std::vector<std::string> order_;

  // The storages, in order of first reference.
  std::vector<Storage> storages_;
  absl::flat_hash_map<std::string, size_t> storage_index_;
  absl::flat_hash_set<std::string> written_, kept_;

  bool fits_ = false;  // The base's layout is kept.

  // The collector's layout when the base's does not fit.
  std::vector<OutEntry> entries_;
  std::vector<size_t> segment_first_;  // Entry index of each segment's first key.
  internal::PtdLayout layout_;

  // Fingerprints of what the optimistic layout wrote, per entry.
  std::vector<size_t> fingerprints_;
  bool exact_layout_ = false;
  std::vector<uint8_t> copy_buf_;
};

// The checkpoint's tensors under their new names; two renamed alike are an
// error.
absl::Status Reweighter::NameTensors(const SafetensorsCheckpoint& ckpt) {
  for (const SafetensorsCheckpoint::TensorRef& ref : ckpt.tensors()) {
    std::string name = Rename(ref.tensor->name, options_.rename);
    auto [it, inserted] = by_name_.try_emplace(name, RenamedTensor{ref});
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(checkpoint_, ": checkpoint tensors '", it->second.ref.tensor->name,
                       "' and '", ref.tensor->name, "' are both renamed to '", name, "'"));
    }
    order_.push_back(std::move(name));
  }
  return absl::OkStatus();
}

// The base's entry under `key` when it holds `nbytes` bytes, else null.
const NamedDataEntry* Reweighter::BaseEntry(std::string_view key, uint64_t nbytes) const {
  if (!base_) return nullptr;
  const NamedDataEntry* n = base_->Find(key);
  if (n == nullptr || base_->SegmentSize(*n) != nbytes) return nullptr;
  return n;
}

Storage& Reweighter::StorageFor(std::string_view key, uint64_t nbytes) {
  auto [it, inserted] = storage_index_.try_emplace(std::string(key), storages_.size());
  if (inserted) {
    storages_.push_back(
        Storage{.key = std::string(key), .nbytes = nbytes, .base = BaseEntry(key, nbytes)});
  }
  return storages_[it->second];
}

// S10: a view the checkpoint has no tensor for keeps the base's bytes, when
// the base has the storage (warning S12), else fails.
absl::Status Reweighter::KeepFromBase(Storage& s, ViewUse u, const std::string& where) {
  if (s.base == nullptr) {
    std::string why =
        !base_ ? "no base .ptd was given"
        : base_->Find(s.key) == nullptr
            ? absl::StrCat("the base ", *options_.base, " has no key '", s.key, "'")
            : absl::StrCat("the base's segment under '", s.key, "' is ",
                           *base_->SegmentSize(*base_->Find(s.key)), " bytes, not ", s.nbytes);
    return RuleError(absl::StatusCode::kInvalidArgument, "S10",
                     absl::StrCat(checkpoint_, ": ", where, ": the checkpoint has no tensor '",
                                  u.fqn, "' and ", why, " to supply storage '", s.key, "'"));
  }
  if (kept_.insert(u.fqn).second) {
    result_.kept.push_back(u.fqn);
    result_.report.Warning(
        "S12",
        absl::StrCat(where, ": the checkpoint has no tensor '", u.fqn,
                     "': its bytes are kept from the base (storage '", s.key, "')"),
        Where{.file = checkpoint_, .key = s.key, .fqn = u.fqn});
  }
  s.views.push_back(std::move(u));
  return absl::OkStatus();
}

// Adds view `u` (of a weight of `dtype`) to `s`, with the checkpoint tensor
// that fills it, checked against the weight (S8), or the base's bytes (S10).
absl::Status Reweighter::Attach(Storage& s, ViewUse u, int32_t dtype, const std::string& where) {
  auto it = by_name_.find(u.fqn);
  if (it == by_name_.end()) return KeepFromBase(s, std::move(u), where);
  it->second.used = true;
  const SafetensorsTensor& t = *it->second.ref.tensor;
  const std::string& tfile = it->second.ref.file->path();
  if (t.dtype->scalar_type != dtype) {
    std::string extra;
    if (!IsFloating(dtype) && IsFloating(t.dtype->scalar_type)) {
      extra = absl::StrCat(
          "; the weight is quantized or packed (an integer dtype) and a "
          "floating tensor is never reinterpreted: give it as ",
          Sv(SafetensorsDtypeFor(dtype) ? SafetensorsDtypeFor(dtype)->name
                                        : ScalarTypeName(dtype)));
    }
    return RuleError(absl::StatusCode::kInvalidArgument, "S8",
                     absl::StrCat(tfile, ": ", where, ": checkpoint tensor '", t.name, "' is ",
                                  Sv(t.dtype->name), " but the weight's dtype is ",
                                  Sv(ScalarTypeName(dtype)), " (", dtype, ")", extra));
  }
  std::vector<uint64_t> sizes(u.sizes.begin(), u.sizes.end());
  if (t.shape != sizes) {
    return RuleError(
        absl::StatusCode::kInvalidArgument, "S8",
        absl::StrCat(tfile, ": ", where, ": checkpoint tensor '", t.name, "' has shape ",
                     ShapeString(t.shape), " but the weight's sizes are ", ShapeString(sizes)));
  }
  u.file = it->second.ref.file;
  u.tensor = &t;
  if (written_.insert(u.fqn).second) result_.written.push_back(u.fqn);
  s.views.push_back(std::move(u));
  return absl::OkStatus();
}

// The storages the manifests reference, each view checked (S8, S10).
absl::Status Reweighter::PlanWeights(const WeightSet& weights) {
  absl::flat_hash_map<std::pair<std::string, std::string>, std::vector<size_t>> views_by_fqn;
  for (const ResolvedManifest& m : weights.manifests()) {
    for (const ResolvedWeight& w : m.weights) {
      const WeightEntry& e = *w.entry;
      if (w.runtime_owned) continue;
      Storage& s = StorageFor(e.storage_key, e.storage_nbytes);
      // A weight that several manifests show through the same view is
      // placed once.
      std::vector<size_t>& same_fqn =
          views_by_fqn[{std::string(e.storage_key), std::string(e.fqn)}];
      const bool seen = std::any_of(same_fqn.begin(), same_fqn.end(), [&](size_t i) {
        const ViewUse& v = s.views[i];
        return v.offset == e.storage_offset && v.sizes == e.sizes && v.strides == e.strides;
      });
      if (seen) continue;
      same_fqn.push_back(s.views.size());
      ViewUse u{.fqn = std::string(e.fqn),
                .source = m.source(),
                .element_size = *ElementSize(e.dtype),
                .offset = e.storage_offset,
                .sizes = e.sizes,
                .strides = e.strides,
                .extent = *w.extent};
      u.contiguous = IsContiguous(u.spec());
      PTD_RETURN_IF_ERROR(Attach(s, std::move(u), e.dtype,
                                 absl::StrCat("weight '", Sv(e.fqn), "' (", m.source(), ")")));
    }
  }
  return absl::OkStatus();
}

// Key mode: each of the base's keys, as one U8 view over its whole storage.
absl::Status Reweighter::PlanKeys() {
  for (const NamedDataEntry& n : base_->named_data()) {
    const uint64_t size = *base_->SegmentSize(n);
    Storage& s = StorageFor(n.key, size);
    ViewUse u{.fqn = std::string(n.key),
              .element_size = 1,
              .sizes = {static_cast<int64_t>(size)},
              .strides = {1}};
    u.extent = ComputeExtent(u.spec()).extent;
    u.contiguous = true;
    PTD_RETURN_IF_ERROR(Attach(s, std::move(u), 0, absl::StrCat("key '", Sv(n.key), "'")));
  }
  return absl::OkStatus();
}

// S11: a warning for each checkpoint tensor no weight uses.
void Reweighter::ReportUnused() {
  for (const std::string& name : order_) {
    const RenamedTensor& n = by_name_.at(name);
    if (n.used) continue;
    result_.unused.push_back(n.ref.tensor->name);
    result_.report.Warning(
        "S11",
        absl::StrCat(
            "checkpoint tensor '", n.ref.tensor->name, "'",
            name != n.ref.tensor->name ? absl::StrCat(" (renamed '", name, "')") : std::string(),
            " is used by no weight"),
        Where{.file = n.ref.file->path()});
  }
}

// Does the base's layout fit? Every storage under a base key of its size,
// and the keys sharing a base segment with a storage still equal.
absl::StatusOr<bool> Reweighter::BaseLayoutFits() {
  bool fits = base_ != nullptr;
  for (const Storage& s : storages_) fits = fits && s.base != nullptr;
  if (!fits) return fits;
  std::vector<std::vector<const NamedDataEntry*>> by_segment(base_->segments().size());
  for (const NamedDataEntry& n : base_->named_data()) by_segment[n.segment_index].push_back(&n);
  for (const auto& keys : by_segment) {
    if (keys.size() < 2 || !fits) continue;
    std::optional<std::string> first;
    bool any_storage = false;
    for (const NamedDataEntry* n : keys)
      any_storage |= storage_index_.contains(std::string(n->key));
    if (!any_storage) continue;
    for (const NamedDataEntry* n : keys) {
      std::string digest;
      if (auto it = storage_index_.find(std::string(n->key)); it != storage_index_.end()) {
        PTD_ASSIGN_OR_RETURN(digest, builder_.Hash(storages_[it->second]));
      } else {
        PTD_ASSIGN_OR_RETURN(
            digest, DigestRange(base_->source(), base_->SegmentFileOffset(n->segment_index),
                                *base_->SegmentSize(*n)));
      }
      if (first && *first != digest) fits = false;
      if (!first) first = digest;
    }
  }
  return fits;
}

// The collector's entries: every storage, then the base's other keys.
void Reweighter::CollectEntries() {
  for (const Storage& s : storages_) {
    const NamedDataEntry* b = base_ ? base_->Find(s.key) : nullptr;
    entries_.push_back(OutEntry{.key = s.key,
                                .storage = &s,
                                .size = s.nbytes,
                                .layout = b && s.base ? b->layout : nullptr});
  }
  if (base_) {
    for (const NamedDataEntry& n : base_->named_data()) {
      if (storage_index_.contains(std::string(n.key))) continue;
      entries_.push_back(OutEntry{.key = std::string(n.key),
                                  .base = &n,
                                  .size = *base_->SegmentSize(n),
                                  .layout = n.layout});
    }
  }
}

// The base's layout when it fits, else the collector's entries.
absl::Status Reweighter::DecideLayout() {
  PTD_ASSIGN_OR_RETURN(fits_, BaseLayoutFits());
  if (!fits_) CollectEntries();
  return absl::OkStatus();
}

// Gives each entry its segment: entries with the same id share one.
absl::Status Reweighter::AssignSegments(bool exact) {
  segment_first_.clear();
  for (OutEntry& e : entries_) e.segment = 0;
  absl::flat_hash_map<uint64_t, int> size_count;
  for (const OutEntry& e : entries_) ++size_count[e.size];
  absl::flat_hash_map<std::string, uint32_t> by_digest;
  for (size_t i = 0; i < entries_.size(); ++i) {
    OutEntry& e = entries_[i];
    std::string id = absl::StrCat("#", i);
    // Keys that share a segment in the base are equal without a look.
    if (!exact && e.base != nullptr) id = absl::StrCat("base#", e.base->segment_index);
    if (exact && size_count[e.size] > 1) {
      if (e.storage) {
        PTD_ASSIGN_OR_RETURN(id, builder_.Hash(*e.storage));
      } else {
        PTD_ASSIGN_OR_RETURN(
            id,
            DigestRange(base_->source(), base_->SegmentFileOffset(e.base->segment_index), e.size));
      }
      id = absl::StrCat(e.size, ":", id);
    }
    auto [it, inserted] = by_digest.try_emplace(id, static_cast<uint32_t>(segment_first_.size()));
    if (inserted) segment_first_.push_back(i);
    e.segment = it->second;
  }
  return absl::OkStatus();
}

// Identical bytes are stored once (upstream's collector). Whether two
// storages are identical is known only once they are built, and the
// layout (the FlatBuffer's size, so every segment's offset) depends on it.
// So the first try assumes no storage equals another entry (the usual
// case: a layout known up front, each storage built once and written
// while it is built) and fingerprints what it writes; when two entries of
// one size may be equal after all, the exact layout hashes them first and
// the file is written again.
absl::Status Reweighter::MakeLayout(bool exact) {
  PTD_RETURN_IF_ERROR(AssignSegments(exact));
  std::vector<internal::SegmentToPlace> segments;
  segments.reserve(segment_first_.size());
  for (size_t first : segment_first_) segments.push_back({.size = entries_[first].size});
  std::vector<internal::KeyToPlace> keys;
  keys.reserve(entries_.size());
  for (const OutEntry& e : entries_) {
    keys.push_back({.key = e.key, .segment = e.segment, .layout = e.layout});
  }
  PTD_ASSIGN_OR_RETURN(layout_, internal::PlanPtdLayout(segments, keys, kDefaultSegmentAlignment));
  return absl::OkStatus();
}

// The base byte for byte, storages rebuilt in place.
absl::Status Reweighter::ProduceInBase(const WriteFn& write) {
  absl::flat_hash_map<uint32_t, const Storage*> rebuilt;
  for (const Storage& s : storages_) rebuilt.try_emplace(s.base->segment_index, &s);
  const FileSource& src = base_->source();
  uint64_t pos = 0;
  for (uint32_t i = 0; i < base_->segments().size(); ++i) {
    const uint64_t at = base_->SegmentFileOffset(i);
    const uint64_t size = base_->segments()[i].size;
    if (at < pos) continue;  // An empty segment at the next one's offset.
    PTD_RETURN_IF_ERROR(CopyRange(src, pos, at - pos, copy_buf_, write));
    if (auto it = rebuilt.find(i); it != rebuilt.end()) {
      PTD_RETURN_IF_ERROR(builder_.Build(*it->second, true, write));
    } else {
      PTD_RETURN_IF_ERROR(CopyRange(src, at, size, copy_buf_, write));
    }
    pos = at + size;
  }
  return CopyRange(src, pos, src.size() - pos, copy_buf_, write);
}

// The collector's layout; Aborted when the optimistic layout wrote two
// segments that may hold the same bytes.
absl::Status Reweighter::ProduceCollected(const WriteFn& write) {
  PTD_RETURN_IF_ERROR(write(layout_.head));
  PTD_RETURN_IF_ERROR(
      internal::WriteZeros(write, layout_.segment_base_offset - layout_.head.size()));
  uint64_t pos = 0;
  for (size_t i = 0; i < segment_first_.size(); ++i) {
    const OutEntry& e = entries_[segment_first_[i]];
    PTD_RETURN_IF_ERROR(internal::WriteZeros(write, layout_.offsets[i] - pos));
    size_t& fp = fingerprints_[segment_first_[i]];
    fp = absl::HashOf(e.size);
    const WriteFn fingerprinted = [&](absl::Span<const uint8_t> b) {
      if (!exact_layout_) {
        fp = absl::HashOf(fp, absl::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
      }
      return write(b);
    };
    if (e.storage) {
      PTD_RETURN_IF_ERROR(builder_.Build(*e.storage, true, fingerprinted));
    } else {
      PTD_RETURN_IF_ERROR(CopyRange(base_->source(),
                                    base_->SegmentFileOffset(e.base->segment_index), e.size,
                                    copy_buf_, fingerprinted));
    }
    pos = layout_.offsets[i] + e.size;
  }
  if (!exact_layout_) {
    // Two segments of one size and fingerprint may hold the same bytes:
    // then the optimistic layout is not the collector's.
    absl::flat_hash_set<std::pair<uint64_t, size_t>> seen;
    for (size_t first : segment_first_) {
      if (!seen.emplace(entries_[first].size, fingerprints_[first]).second) {
        return absl::AbortedError("identical storages: the exact layout is needed");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Reweighter::Produce(const WriteFn& write) {
  result_.zero_filled.clear();
  result_.zero_filled_bytes = 0;
  return fits_ ? ProduceInBase(write) : ProduceCollected(write);
}

// The finished temporary file, verified with the program before the rename.
absl::Status Reweighter::Check(const std::string& temp) const {
  BundlePaths verify{.ptd = temp, .manifest = program_.manifest, .pte = program_.pte};
  auto bundle = WeightBundle::Open(verify);
  if (!bundle.ok()) {
    return PrefixStatus("the reweighted .ptd fails verification: ", bundle.status());
  }
  return absl::OkStatus();
}

// Writes `out` atomically: the optimistic layout first, the exact one when
// identical storages turn up.
absl::Status Reweighter::Write() {
  if (!fits_) PTD_RETURN_IF_ERROR(MakeLayout(/*exact=*/false));
  fingerprints_.assign(entries_.size(), 0);
  const auto produce = [this](const WriteFn& write, const WriteAtFn&) { return Produce(write); };
  const auto check = [this](const std::string& temp) { return Check(temp); };
  absl::Status status = WriteFileAtomicallyAt(out_, produce, check);
  if (!fits_ && absl::IsAborted(status)) {
    // Nothing was left behind; lay the file out with identical storages
    // stored once, and write it again.
    exact_layout_ = true;
    PTD_RETURN_IF_ERROR(MakeLayout(/*exact=*/true));
    status = WriteFileAtomicallyAt(out_, produce, check);
  }
  return status;
}

// S12: a warning for each storage with zero-filled bytes.
void Reweighter::ReportZeroFills() {
  if (result_.zero_filled_bytes == 0) return;
  absl::flat_hash_map<std::string, uint64_t> per_key;
  std::vector<std::string> keys;
  for (const ZeroFill& z : result_.zero_filled) {
    if (per_key[z.key] == 0) keys.push_back(z.key);
    per_key[z.key] += z.nbytes;
  }
  for (const std::string& k : keys) {
    result_.report.Warning("S12",
                           absl::StrCat("storage '", k, "': ", per_key[k],
                                        " bytes that no view covers are zero-filled (no base "
                                        "supplies them)"),
                           Where{.file = out_, .key = k});
  }
}

}  // namespace

absl::StatusOr<ReweightResult> Reweight(const std::string& checkpoint, const BundlePaths& program,
                                        const std::string& out, const ReweightOptions& options) {
  ReweightResult result;
  PTD_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(checkpoint));
  PTD_ASSIGN_OR_RETURN(ProgramManifests pm, LoadProgramManifests(program));
  std::unique_ptr<Container> base;
  if (options.base) {
    PTD_ASSIGN_OR_RETURN(std::shared_ptr<const FileSource> src,
                         OpenFile(*options.base, /*use_mmap=*/false));
    PTD_ASSIGN_OR_RETURN(base, Container::Open(src));
  }
  const bool key_mode = pm.manifests.empty();
  if (key_mode && !base) {
    return absl::InvalidArgumentError(
        "reweighting without a manifest (no BundlePaths::manifest, or a ::pte without one) "
        "needs ReweightOptions::base, a .ptd whose keys it looks up");
  }

  Reweighter reweighter(checkpoint, program, out, options, base.get(), &result);
  PTD_RETURN_IF_ERROR(reweighter.NameTensors(ckpt));
  PTD_RETURN_IF_ERROR(key_mode ? reweighter.PlanKeys() : reweighter.PlanWeights(*pm.weights));
  reweighter.ReportUnused();
  PTD_RETURN_IF_ERROR(reweighter.DecideLayout());
  PTD_RETURN_IF_ERROR(reweighter.Write());
  reweighter.ReportZeroFills();
  return result;
}

}  // namespace ptd
