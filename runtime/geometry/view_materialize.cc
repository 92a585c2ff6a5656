#include "ptd/view_materialize.h"

#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"

namespace ptd {

absl::StatusOr<MaterializePlan> PlanMaterialize(const ViewSpec& view, uint64_t storage_nbytes) {
  if (view.element_size == 0) {
    return absl::InvalidArgumentError("cannot materialize a view with element size 0");
  }
  if (view.sizes.size() > kMaxMaterializeRank) {
    return absl::InvalidArgumentError(absl::StrCat("cannot materialize a view of rank ",
                                                   view.sizes.size(), ": at most ",
                                                   kMaxMaterializeRank));
  }
  const GeometryResult geometry = ComputeExtent(view);
  if (!geometry.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot materialize an invalid view: ", geometry.detail));
  }
  MaterializePlan plan;
  plan.extent = geometry.extent;
  if (plan.extent.required_nbytes > storage_nbytes) {
    return absl::OutOfRangeError(absl::StrCat("the view reaches byte ", plan.extent.required_nbytes,
                                              " of its storage but the storage has ",
                                              storage_nbytes, " bytes"));
  }
  const auto bytes = plan.extent.numel == kSaturatedNumel
                         ? std::nullopt
                         : internal::CheckedMul(plan.extent.numel, uint64_t{view.element_size});
  if (!bytes || *bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the dense copy of the view would take more than 2^63 bytes (",
                     plan.extent.numel == kSaturatedNumel ? std::string("over 2^64")
                                                          : absl::StrCat(plan.extent.numel),
                     " elements of ", view.element_size, " bytes)"));
  }
  plan.output_nbytes = *bytes;
  return plan;
}

absl::Status MaterializeOnHost(absl::Span<const uint8_t> storage, const ViewSpec& view,
                               absl::Span<uint8_t> out) {
  PTD_ASSIGN_OR_RETURN(const MaterializePlan plan, PlanMaterialize(view, storage.size()));
  if (out.size() < plan.output_nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the output holds ", out.size(), " bytes but the view needs ", plan.output_nbytes));
  }
  if (plan.extent.empty()) return absl::OkStatus();
  // An odometer over the view's index, last dimension fastest. Offsets are
  // in elements and stay within [0, required_nbytes / e): PlanMaterialize
  // checked the last element.
  const size_t rank = view.sizes.size();
  const size_t e = view.element_size;
  std::vector<int64_t> index(rank, 0);
  int64_t offset = view.storage_offset;
  uint8_t* dst = out.data();
  for (uint64_t n = 0; n < plan.extent.numel; ++n) {
    std::memcpy(dst, storage.data() + static_cast<size_t>(offset) * e, e);
    dst += e;
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < view.sizes[d]) {
        offset += view.strides[d];
        break;
      }
      offset -= view.strides[d] * (view.sizes[d] - 1);
      index[d] = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace ptd
