#include "ptd/view_digest.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#include "ptd/sha256.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"

namespace ptd {
namespace {

// Dims after dropping size-1 dims and merging dims that are contiguous with
// each other (stride[i] == stride[i+1] * size[i+1]).
struct Dim {
  int64_t size;
  int64_t stride;
};

std::vector<Dim> Coalesce(const ViewSpec& view) {
  std::vector<Dim> dims;
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] == 1) continue;
    dims.push_back({view.sizes[i], view.strides[i]});
  }
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty() && out.back().stride == d.stride * d.size) {
      out.back() = {out.back().size * d.size, d.stride};
    } else {
      out.push_back(d);
    }
  }
  return out;
}

// Reads byte ranges of a storage: from a zero-copy view when the source has
// one; otherwise through a direct-mapped cache of 4 KiB blocks (1 MiB in
// all), so that strided access re-reads little, and a scratch buffer for
// ranges that do not fit one block. Memory stays bounded whatever the view.
class StorageReader {
 public:
  static constexpr uint64_t kBlock = 4096;
  static constexpr uint64_t kSlots = kGatherWindowBytes / kBlock;

  StorageReader(const FileSource& source, uint64_t base, uint64_t nbytes)
      : source_(source), base_(base), nbytes_(nbytes) {
    if (auto v = source.View(base, nbytes)) view_ = *v;
  }

  bool has_view() const { return view_.data() != nullptr || nbytes_ == 0; }

  // Bytes [offset, offset + len) of the storage; len <= kGatherWindowBytes.
  // The pointer is valid until the next call.
  absl::StatusOr<const uint8_t*> Get(uint64_t offset, uint64_t len) {
    if (has_view()) return view_.data() + offset;
    const uint64_t block = offset / kBlock;
    if (len <= kBlock && (offset + len - 1) / kBlock == block) {
      if (cache_.empty()) {
        cache_.resize(kSlots * kBlock);
        tags_.assign(kSlots, kNoBlock);
      }
      const uint64_t slot = block % kSlots;
      uint8_t* data = cache_.data() + slot * kBlock;
      if (tags_[slot] != block) {
        const uint64_t start = block * kBlock;
        const uint64_t n = std::min(kBlock, nbytes_ - start);
        tags_[slot] = kNoBlock;
        PTD_RETURN_IF_ERROR(source_.ReadAt(base_ + start, absl::MakeSpan(data, n)));
        tags_[slot] = block;
      }
      return data + (offset - block * kBlock);
    }
    scratch_.resize(len);
    PTD_RETURN_IF_ERROR(source_.ReadAt(base_ + offset, absl::MakeSpan(scratch_)));
    return scratch_.data();
  }

 private:
  static constexpr uint64_t kNoBlock = ~uint64_t{0};
  const FileSource& source_;
  uint64_t base_;
  uint64_t nbytes_;
  absl::Span<const uint8_t> view_;
  std::vector<uint8_t> cache_;
  std::vector<uint64_t> tags_;
  std::vector<uint8_t> scratch_;
};

// A FileSource over bytes it does not own, so that the gather above runs
// over memory through its zero-copy path.
class SpanSource final : public FileSource {
 public:
  explicit SpanSource(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (!internal::RangeInside(offset, dst.size(), bytes_.size())) {
      return absl::OutOfRangeError("read past the end of the storage");
    }
    if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
    return absl::OkStatus();
  }
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const override {
    if (!internal::RangeInside(offset, len, bytes_.size())) return std::nullopt;
    return bytes_.subspan(offset, len);
  }

 private:
  std::string name_ = "<memory>";
  absl::Span<const uint8_t> bytes_;
};

}  // namespace

absl::Status GatherView(absl::Span<const uint8_t> storage, const ViewSpec& view,
                        const std::function<void(absl::Span<const uint8_t>)>& sink) {
  const SpanSource source(storage);
  return GatherView(source, 0, storage.size(), view, sink);
}

absl::StatusOr<std::string> DigestView(absl::Span<const uint8_t> storage, const ViewSpec& view) {
  const SpanSource source(storage);
  return DigestView(source, 0, storage.size(), view);
}

absl::StatusOr<std::string> DigestRange(const FileSource& source, uint64_t offset, uint64_t len) {
  Sha256 h;
  if (auto v = source.View(offset, len)) {
    h.Update(*v);
    return h.HexDigest();
  }
  std::vector<uint8_t> buf(std::min<uint64_t>(len, kGatherWindowBytes));
  for (uint64_t done = 0; done < len;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), len - done);
    PTD_RETURN_IF_ERROR(source.ReadAt(offset + done, absl::MakeSpan(buf.data(), n)));
    h.Update(absl::MakeConstSpan(buf.data(), n));
    done += n;
  }
  return h.HexDigest();
}

absl::Status GatherView(const FileSource& source, uint64_t storage_offset, uint64_t storage_nbytes,
                        const ViewSpec& view,
                        const std::function<void(absl::Span<const uint8_t>)>& sink) {
  const GeometryResult g = ComputeExtent(view);
  if (!g.ok()) return absl::InvalidArgumentError(g.detail);
  if (g.extent.required_nbytes > storage_nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("view requires ", g.extent.required_nbytes,
                                                   " bytes from a ", storage_nbytes,
                                                   "-byte storage"));
  }
  if (g.extent.empty()) return absl::OkStatus();

  const uint64_t e = view.element_size;
  std::vector<Dim> dims = Coalesce(view);
  // The innermost dim is walked in a tight loop; the outer ones by odometer.
  const Dim inner = dims.empty() ? Dim{1, 1} : dims.back();
  if (!dims.empty()) dims.pop_back();
  const auto inner_size = static_cast<uint64_t>(inner.size);
  const auto inner_stride = static_cast<uint64_t>(inner.stride);
  // Bytes one row of the inner dim spans in the storage.
  const uint64_t row_span = ((inner_size - 1) * inner_stride + 1) * e;

  StorageReader reader(source, storage_offset, storage_nbytes);
  // Sized to what the view gathers, up to the window (small views are many).
  const auto gathered = internal::CheckedMul(g.extent.numel, e);
  std::vector<uint8_t> out(
      std::max<uint64_t>(e, std::min(kGatherWindowBytes, gathered.value_or(kGatherWindowBytes))));
  size_t used = 0;
  const auto flush = [&] {
    if (used > 0) sink(absl::MakeConstSpan(out.data(), used));
    used = 0;
  };
  const auto emit = [&](const uint8_t* p, uint64_t n) {
    while (n > 0) {
      const uint64_t take = std::min<uint64_t>(n, out.size() - used);
      std::memcpy(out.data() + used, p, take);
      used += take;
      p += take;
      n -= take;
      if (used == out.size()) flush();
    }
  };
  // Emits the inner row that starts at element `elem`.
  const auto emit_row = [&](uint64_t elem) -> absl::Status {
    const uint64_t first = elem * e;
    if (inner_stride == 1) {  // One contiguous run, read in window-sized pieces.
      for (uint64_t done = 0; done < row_span;) {
        const uint64_t n = std::min(kGatherWindowBytes, row_span - done);
        PTD_ASSIGN_OR_RETURN(const uint8_t* p, reader.Get(first + done, n));
        emit(p, n);
        done += n;
      }
      return absl::OkStatus();
    }
    if (reader.has_view()) {  // The row straight from the mapping.
      PTD_ASSIGN_OR_RETURN(const uint8_t* p, reader.Get(first, row_span));
      for (uint64_t j = 0; j < inner_size; ++j) {
        if (used + e > out.size()) flush();
        std::memcpy(out.data() + used, p + j * inner_stride * e, e);
        used += e;
      }
      return absl::OkStatus();
    }
    for (uint64_t j = 0; j < inner_size; ++j) {
      PTD_ASSIGN_OR_RETURN(const uint8_t* p, reader.Get(first + j * inner_stride * e, e));
      emit(p, e);
    }
    return absl::OkStatus();
  };

  // Odometer over the outer dims; offsets fit in int64 (checked by G1).
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t elem = view.storage_offset;
  while (true) {
    PTD_RETURN_IF_ERROR(emit_row(static_cast<uint64_t>(elem)));
    size_t d = dims.size();
    bool carried_out = true;
    while (d > 0) {
      --d;
      if (++idx[d] < dims[d].size) {
        elem += dims[d].stride;
        carried_out = false;
        break;
      }
      elem -= dims[d].stride * (dims[d].size - 1);
      idx[d] = 0;
    }
    if (carried_out) break;
  }
  flush();
  return absl::OkStatus();
}

absl::StatusOr<std::string> DigestView(const FileSource& source, uint64_t storage_offset,
                                       uint64_t storage_nbytes, const ViewSpec& view) {
  Sha256 h;
  PTD_RETURN_IF_ERROR(GatherView(source, storage_offset, storage_nbytes, view,
                                 [&](absl::Span<const uint8_t> b) { h.Update(b); }));
  return h.HexDigest();
}

}  // namespace ptd
