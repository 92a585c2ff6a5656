// Materializing a strided view: a dense, row-major copy of the elements a
// ptd::ViewSpec selects from its storage (transposed, broadcast, offset,
// 0-dim and empty views alike).
//
// MaterializeOnHost is the plain reference: one element at a time, in the
// order of the view's sizes, with nothing clever. The CUDA device
// (ptd/cuda_device.h, CudaDevice::Materialize) does the same on the GPU and
// its tests compare against this byte for byte.
// Thread-safety: free functions without state.
#ifndef PTD_VIEW_MATERIALIZE_H_
#define PTD_VIEW_MATERIALIZE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/view_geometry.h"

namespace ptd {

// Highest rank a view may have to be materialized (the CUDA kernel passes
// sizes and strides by value: 64 x 2 x int64 = 1 KiB of kernel parameters).
inline constexpr size_t kMaxMaterializeRank = 64;

// What materializing `view` involves, after checking it.
struct MaterializePlan {
  ViewExtent extent;           // Where the view lies in its storage.
  uint64_t output_nbytes = 0;  // numel * element_size: the dense copy's size.
};

// Checks that `view` can be materialized from a storage of `storage_nbytes`:
// valid geometry (InvalidArgument with the G1/G2 detail), rank at most
// kMaxMaterializeRank and element_size > 0 (InvalidArgument), the view inside
// the storage (OutOfRange, both numbers), and a dense copy whose size fits
// in 63 bits (ResourceExhausted: a broadcast view can name 2^64 elements).
absl::StatusOr<MaterializePlan> PlanMaterialize(const ViewSpec& view, uint64_t storage_nbytes);

// Writes the view's elements, row-major in `view.sizes`, to `out`.
// `storage` is the whole storage the view indexes (element 0 at
// storage.data()); `out` must hold at least output_nbytes (InvalidArgument
// otherwise). Empty views write nothing; a 0-dim view writes one element.
absl::Status MaterializeOnHost(absl::Span<const uint8_t> storage, const ViewSpec& view,
                               absl::Span<uint8_t> out);

}  // namespace ptd

#endif  // PTD_VIEW_MATERIALIZE_H_
