// A view reduced to the fewest dimensions that index the same elements in
// the same order: size-1 dimensions dropped, neighbours that step like one
// dimension merged (stride[d] == stride[d+1] * size[d+1]). A transposed
// matrix stays rank 2, a contiguous tensor becomes rank 1 with stride 1, a
// 0-dim or all-ones view becomes rank 0. Used by the CUDA device to pick a
// fast path and to keep the gather kernel's index arithmetic short; the host
// reference deliberately does not use it.
#ifndef PTD_RUNTIME_CUDA_INTERNAL_COLLAPSED_VIEW_H_
#define PTD_RUNTIME_CUDA_INTERNAL_COLLAPSED_VIEW_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

#include "ptd/view_materialize.h"

namespace ptd::internal {

struct CollapsedView {
  int32_t rank = 0;
  int64_t sizes[kMaxMaterializeRank] = {};
  int64_t strides[kMaxMaterializeRank] = {};
};

// REQUIRES: a view PlanMaterialize accepted (so the rank is at most
// kMaxMaterializeRank) and not empty (no size is 0).
inline CollapsedView CollapseView(absl::Span<const int64_t> sizes,
                                  absl::Span<const int64_t> strides) {
  CollapsedView c;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    int64_t span;
    if (c.rank > 0 && !__builtin_mul_overflow(strides[d], sizes[d], &span) &&
        c.strides[c.rank - 1] == span) {
      // The merged size is a product of sizes: at most numel, which fits.
      c.sizes[c.rank - 1] *= sizes[d];
      c.strides[c.rank - 1] = strides[d];
      continue;
    }
    c.sizes[c.rank] = sizes[d];
    c.strides[c.rank] = strides[d];
    ++c.rank;
  }
  return c;
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_CUDA_INTERNAL_COLLAPSED_VIEW_H_
