// Launchers for the materialize kernels (runtime/cuda/gather_kernels.cu).
// Plain types only, so the .cu file needs no abseil. Elements are copied as
// `word_size`-byte words (1, 2, 4 or 8); the caller picks the widest word
// that divides the element size and the source address.
#ifndef PTD_CUDA_INTERNAL_GATHER_KERNELS_H_
#define PTD_CUDA_INTERNAL_GATHER_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ptd::internal {

inline constexpr int kMaxGatherRank = 64;

// A (collapsed) view, passed to the kernel by value: 1 KiB and a bit of
// kernel parameters (the limit is 4 KiB).
struct GatherGeometry {
  int32_t rank = 0;
  int32_t words_per_element = 1;
  int64_t sizes[kMaxGatherRank] = {};
  int64_t strides[kMaxGatherRank] = {};  // Elements.
};

// dst[n] = element of `src` at sum(index_d(n) * strides[d]), for n in
// [0, numel), row-major in `sizes`. `src` points at the view's first
// element. Returns the launch error (cudaGetLastError), if any.
cudaError_t LaunchGather(const void* src, void* dst, uint64_t numel, uint32_t word_size,
                         const GatherGeometry& geometry, cudaStream_t stream);

// dst[r * cols + c] = src[r + c * ld]: the dense copy of a rows x cols view
// with strides (1, ld), through 32 x 32 shared-memory tiles. Elements are
// single words (`word_size` bytes).
cudaError_t LaunchTranspose(const void* src, void* dst, int64_t rows, int64_t cols, int64_t ld,
                            uint32_t word_size, cudaStream_t stream);

// One piece of a scatter: `nbytes` at `src_offset` of the copied block go
// to `dst_offset` past the destination base (Device::ScatterToDeviceAsync's
// table, laid out as ScatterPiece).
struct ScatterEntry {
  uint64_t src_offset;
  uint64_t dst_offset;
  uint64_t nbytes;
};

// dst_base[e.dst_offset + j] = src[e.src_offset + j] for each of the
// `count` entries of `table` (device memory) and j < e.nbytes.
cudaError_t LaunchScatter(const void* src, const ScatterEntry* table, uint64_t count,
                          void* dst_base, cudaStream_t stream);

}  // namespace ptd::internal

#endif  // PTD_CUDA_INTERNAL_GATHER_KERNELS_H_
