#include "runtime/weights/view_digest.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/sha256.h"
#include "runtime/core/status_macros.h"

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

// Reads byte ranges of a storage, from a zero-copy view when the source has
// one, else through a window of at most kGatherWindowBytes.
class StorageReader {
 public:
  StorageReader(const FileSource& source, uint64_t base, uint64_t nbytes)
      : source_(source), base_(base), nbytes_(nbytes) {
    if (auto v = source.View(base, nbytes)) view_ = *v;
  }

  // Bytes [offset, offset + len) of the storage; len <= kGatherWindowBytes.
  absl::StatusOr<const uint8_t*> Get(uint64_t offset, uint64_t len) {
    if (view_.data() != nullptr || nbytes_ == 0) return view_.data() + offset;
    if (offset < win_begin_ || offset + len > win_begin_ + window_.size()) {
      const uint64_t n = std::min<uint64_t>(kGatherWindowBytes, nbytes_ - offset);
      window_.resize(n);
      RETURN_IF_ERROR(source_.ReadAt(base_ + offset, absl::MakeSpan(window_)));
      win_begin_ = offset;
    }
    return window_.data() + (offset - win_begin_);
  }

 private:
  const FileSource& source_;
  uint64_t base_;
  uint64_t nbytes_;
  absl::Span<const uint8_t> view_;
  std::vector<uint8_t> window_;
  uint64_t win_begin_ = 0;
};

}  // namespace

absl::StatusOr<std::string> DigestRange(const FileSource& source, uint64_t offset,
                                        uint64_t len) {
  Sha256 h;
  if (auto v = source.View(offset, len)) {
    h.Update(*v);
    return h.HexDigest();
  }
  std::vector<uint8_t> buf(std::min<uint64_t>(len, kGatherWindowBytes));
  for (uint64_t done = 0; done < len;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), len - done);
    RETURN_IF_ERROR(source.ReadAt(offset + done, absl::MakeSpan(buf.data(), n)));
    h.Update(absl::MakeConstSpan(buf.data(), n));
    done += n;
  }
  return h.HexDigest();
}

absl::Status GatherView(const FileSource& source, uint64_t storage_offset,
                        uint64_t storage_nbytes, const ViewSpec& view,
                        const std::function<void(absl::Span<const uint8_t>)>& sink) {
  const GeometryResult g = ComputeExtent(view);
  if (!g.ok()) return absl::InvalidArgumentError(g.detail);
  if (g.extent.required_nbytes > storage_nbytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("view requires ", g.extent.required_nbytes,
                     " bytes from a ", storage_nbytes, "-byte storage"));
  }
  if (g.extent.empty()) return absl::OkStatus();

  const uint64_t e = view.element_size;
  std::vector<Dim> dims = Coalesce(view);
  // The innermost run of contiguous bytes.
  uint64_t run_elems = 1;
  if (!dims.empty() && dims.back().stride == 1) {
    run_elems = static_cast<uint64_t>(dims.back().size);
    dims.pop_back();
  }
  // Split runs longer than the window.
  const uint64_t max_run_elems = std::max<uint64_t>(1, kGatherWindowBytes / e);

  StorageReader reader(source, storage_offset, storage_nbytes);
  std::vector<uint8_t> out;
  out.reserve(kGatherWindowBytes);
  const auto emit = [&](const uint8_t* p, uint64_t n) {
    while (n > 0) {
      const uint64_t take = std::min<uint64_t>(n, kGatherWindowBytes - out.size());
      out.insert(out.end(), p, p + take);
      p += take;
      n -= take;
      if (out.size() == kGatherWindowBytes) {
        sink(out);
        out.clear();
      }
    }
  };

  // Odometer over the outer dims; offsets fit in int64 (checked by G1).
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t elem = view.storage_offset;
  while (true) {
    for (uint64_t done = 0; done < run_elems;) {
      const uint64_t n = std::min(max_run_elems, run_elems - done);
      const uint64_t byte = (static_cast<uint64_t>(elem) + done) * e;
      ASSIGN_OR_RETURN(const uint8_t* p, reader.Get(byte, n * e));
      emit(p, n * e);
      done += n;
    }
    size_t d = dims.size();
    while (d > 0) {
      --d;
      if (++idx[d] < dims[d].size) {
        elem += dims[d].stride;
        break;
      }
      elem -= dims[d].stride * (dims[d].size - 1);
      idx[d] = 0;
      if (d == 0) {
        d = SIZE_MAX;
        break;
      }
    }
    if (dims.empty() || d == SIZE_MAX) break;
  }
  if (!out.empty()) sink(out);
  return absl::OkStatus();
}

absl::StatusOr<std::string> DigestView(const FileSource& source,
                                       uint64_t storage_offset,
                                       uint64_t storage_nbytes,
                                       const ViewSpec& view) {
  Sha256 h;
  RETURN_IF_ERROR(GatherView(source, storage_offset, storage_nbytes, view,
                             [&](absl::Span<const uint8_t> b) { h.Update(b); }));
  return h.HexDigest();
}

}  // namespace ptd
