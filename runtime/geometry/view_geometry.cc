#include "ptd/view_geometry.h"

#include <vector>

#include "absl/strings/str_cat.h"

#include "runtime/internal/checked_math.h"

namespace ptd {

GeometryResult ComputeExtent(const ViewSpec& view) {
  GeometryResult r;
  if (view.sizes.size() != view.strides.size()) {
    r.error = GeometryError::kRankMismatch;
    r.detail = absl::StrCat(view.sizes.size(), " sizes but ", view.strides.size(), " strides");
    return r;
  }
  if (view.storage_offset < 0) {
    r.error = GeometryError::kNegative;
    r.detail = absl::StrCat("storage_offset ", view.storage_offset, " is negative");
    return r;
  }
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] < 0 || view.strides[i] < 0) {
      r.error = GeometryError::kNegative;
      r.detail = absl::StrCat(view.sizes[i] < 0 ? "size" : "stride", "[", i, "] is ",
                              view.sizes[i] < 0 ? view.sizes[i] : view.strides[i]);
      return r;
    }
  }
  const auto overflow = [&](std::string what) {
    r.error = GeometryError::kOverflow;
    r.detail = std::move(what);
    return r;
  };
  // numel is not part of the span arithmetic: a broadcast view may have more
  // than 2^64 elements and still need few bytes. It saturates.
  uint64_t numel = 1;
  bool any_zero = false;
  for (int64_t s : view.sizes) {
    if (s == 0) any_zero = true;
    const auto next = internal::CheckedMul(numel, static_cast<uint64_t>(s));
    numel = next ? *next : kSaturatedNumel;
  }
  if (any_zero) {
    r.extent = ViewExtent{};
    return r;
  }

  const auto e = static_cast<int64_t>(view.element_size);
  std::optional<int64_t> last = view.storage_offset;
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    const auto step = internal::CheckedMul(view.strides[i], view.sizes[i] - 1);
    if (!step) {
      return overflow(absl::StrCat("stride[", i, "] ", view.strides[i], " * (size[", i, "] ",
                                   view.sizes[i], " - 1) overflows int64"));
    }
    last = internal::CheckedAdd(*last, *step);
    if (!last) {
      return overflow(
          absl::StrCat("the offset of the last element overflows "
                       "int64 at dim ",
                       i));
    }
  }
  const auto count = internal::CheckedAdd(*last, int64_t{1});
  const auto bytes = count ? internal::CheckedMul(*count, e) : std::nullopt;
  if (!bytes) {
    return overflow(
        absl::StrCat("(last element ", *last, " + 1) * element size ", e, " overflows int64"));
  }
  const auto first = internal::CheckedMul(view.storage_offset, e);
  if (!first) return overflow("storage_offset * element size overflows int64");
  r.extent.required_nbytes = static_cast<uint64_t>(*bytes);
  r.extent.first_byte = static_cast<uint64_t>(*first);
  r.extent.numel = numel;
  return r;
}

bool IsContiguous(const ViewSpec& view) {
  if (view.sizes.size() != view.strides.size()) return false;
  int64_t expected = 1;
  for (size_t i = view.sizes.size(); i-- > 0;) {
    if (view.sizes[i] == 0) return true;
    if (view.sizes[i] == 1) continue;  // Any stride is fine for a size-1 dim.
    if (view.strides[i] != expected) return false;
    const auto next = internal::CheckedMul(expected, view.sizes[i]);
    if (!next) return false;
    expected = *next;
  }
  return true;
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return strides;
}

}  // namespace ptd
