// The materialize kernels: a generic gather and a tiled transpose. Kept few
// and small (4 word types each) because every one is compiled for every
// architecture. Index arithmetic is 64-bit throughout; both kernels loop
// over their work (grid-stride), so no grid dimension exceeds its limit
// whatever the element count.
#include <algorithm>
#include <cstdint>

#include "runtime/cuda/internal/gather_kernels.h"
#include "runtime/cuda/internal/kernel_launch.h"

namespace ptd::internal {
namespace {

constexpr int kGatherThreads = 256;
constexpr uint64_t kMaxGatherBlocks = uint64_t{1} << 20;  // Then grid-stride.
constexpr int kTile = 32;
constexpr int kTileRows = 8;  // Block is kTile x kTileRows threads.
constexpr int64_t kMaxGridX = 0x7fffffff;
constexpr int64_t kMaxGridY = 65535;

template <typename W>
__global__ void GatherKernel(const W* __restrict__ src, W* __restrict__ dst, uint64_t numel,
                             const GatherGeometry geometry) {
  // The geometry goes to shared memory once per block: indexing kernel
  // parameters with a run-time index could make each thread a local copy.
  __shared__ int64_t sizes[kMaxGatherRank];
  __shared__ int64_t strides[kMaxGatherRank];
  const int rank = geometry.rank;
#pragma unroll
  for (int d = 0; d < kMaxGatherRank; ++d) {
    if (static_cast<int>(threadIdx.x) == d && d < rank) {
      sizes[d] = geometry.sizes[d];
      strides[d] = geometry.strides[d];
    }
  }
  __syncthreads();
  const int k = geometry.words_per_element;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t n = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < numel;
       n += step) {
    uint64_t rest = n;
    int64_t offset = 0;  // Elements from `src`; at most the view's last, which fits.
    for (int d = rank - 1; d >= 0; --d) {
      const uint64_t size = static_cast<uint64_t>(sizes[d]);
      offset += static_cast<int64_t>(rest % size) * strides[d];
      rest /= size;
    }
    const W* from = src + offset * k;
    W* to = dst + n * static_cast<uint64_t>(k);
    for (int j = 0; j < k; ++j) to[j] = from[j];
  }
}

template <typename W>
__global__ void TransposeKernel(const W* __restrict__ src, W* __restrict__ dst, int64_t rows,
                                int64_t cols, int64_t ld) {
  __shared__ W tile[kTile][kTile + 1];  // +1: no bank conflicts on the column read.
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  // Tile loops depend on the block only, so every thread reaches each
  // __syncthreads() the same number of times.
  for (int64_t tr = blockIdx.y; tr < row_tiles; tr += gridDim.y) {
    for (int64_t tc = blockIdx.x; tc < col_tiles; tc += gridDim.x) {
      const int64_t r0 = tr * kTile;
      const int64_t c0 = tc * kTile;
      // Read along r (stride 1 in src): tile[j][x] = element (r0 + x, c0 + j).
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int64_t r = r0 + threadIdx.x;
        const int64_t c = c0 + j;
        if (r < rows && c < cols) tile[j][threadIdx.x] = src[r + c * ld];
      }
      __syncthreads();
      // Write along c (stride 1 in dst): element (r0 + j, c0 + x).
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        const int64_t r = r0 + j;
        const int64_t c = c0 + threadIdx.x;
        if (r < rows && c < cols) dst[r * cols + c] = tile[threadIdx.x][j];
      }
      __syncthreads();
    }
  }
}

template <typename W>
cudaError_t Gather(const void* src, void* dst, uint64_t numel, const GatherGeometry& geometry,
                   cudaStream_t stream) {
  const uint64_t blocks =
      std::min<uint64_t>((numel + kGatherThreads - 1) / kGatherThreads, kMaxGatherBlocks);
  // A launch sets the last error only when it fails: clear what an earlier,
  // ignored failure left there, so the check below reports this launch.
  (void)cudaGetLastError();
  PTD_LAUNCH(GatherKernel<W>, static_cast<unsigned>(blocks), kGatherThreads, 0, stream)
  (static_cast<const W*>(src), static_cast<W*>(dst), numel, geometry);
  return cudaGetLastError();
}

template <typename W>
cudaError_t Transpose(const void* src, void* dst, int64_t rows, int64_t cols, int64_t ld,
                      cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(std::min((cols + kTile - 1) / kTile, kMaxGridX)),
                  static_cast<unsigned>(std::min((rows + kTile - 1) / kTile, kMaxGridY)));
  (void)cudaGetLastError();  // As in Gather: the check below is this launch's.
  PTD_LAUNCH(TransposeKernel<W>, grid, dim3(kTile, kTileRows), 0, stream)
  (static_cast<const W*>(src), static_cast<W*>(dst), rows, cols, ld);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGather(const void* src, void* dst, uint64_t numel, uint32_t word_size,
                         const GatherGeometry& geometry, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  switch (word_size) {
    case 1:
      return Gather<uint8_t>(src, dst, numel, geometry, stream);
    case 2:
      return Gather<uint16_t>(src, dst, numel, geometry, stream);
    case 4:
      return Gather<uint32_t>(src, dst, numel, geometry, stream);
    case 8:
      return Gather<uint64_t>(src, dst, numel, geometry, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchTranspose(const void* src, void* dst, int64_t rows, int64_t cols, int64_t ld,
                            uint32_t word_size, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  switch (word_size) {
    case 1:
      return Transpose<uint8_t>(src, dst, rows, cols, ld, stream);
    case 2:
      return Transpose<uint16_t>(src, dst, rows, cols, ld, stream);
    case 4:
      return Transpose<uint32_t>(src, dst, rows, cols, ld, stream);
    case 8:
      return Transpose<uint64_t>(src, dst, rows, cols, ld, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ptd::internal
