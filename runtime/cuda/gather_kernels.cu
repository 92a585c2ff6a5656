// The materialize kernels: a generic gather and a tiled transpose. Kept few
// and small (4 word types each) because every one is compiled for every
// architecture. Index arithmetic is 64-bit throughout; both kernels loop
// over their work (grid-stride), so no grid dimension exceeds its limit
// whatever the element count.
//
// Each kernel is instantiated for its word types as an entry point with a C
// name (ptd_gather_w4, ...), so that a build whose kernels were compiled
// ahead of time (PTD_CUDA_PREBUILT_KERNELS: the CUDA 12 build of the GPU
// bundle, runtime/cuda/prebuilt_kernels.cc) finds them in the image by name.
// That build compiles this file with the host compiler for the launchers
// only; the device code below is then left out.
#include <algorithm>
#include <cstdint>

#include "runtime/cuda/internal/gather_kernels.h"
#include "runtime/cuda/internal/kernel_launch.h"

namespace ptd::internal {
namespace {

constexpr int kGatherThreads = 256;
// GatherBody's first threads copy the geometry into shared memory, one
// dimension each.
static_assert(kGatherThreads >= kMaxGatherRank, "a gather block copies one dimension a thread");
constexpr uint64_t kMaxGatherBlocks = uint64_t{1} << 20;  // Then grid-stride.
constexpr int kTile = 32;
constexpr int kTileRows = 8;  // Block is kTile x kTileRows threads.
constexpr int64_t kMaxGridX = 0x7fffffff;
constexpr int64_t kMaxGridY = 65535;

#if !defined(PTD_CUDA_PREBUILT_KERNELS)

template <typename W>
__device__ __forceinline__ void GatherBody(const W* __restrict__ src, W* __restrict__ dst,
                                           uint64_t numel, const GatherGeometry& geometry) {
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
__device__ __forceinline__ void TransposeBody(const W* __restrict__ src, W* __restrict__ dst,
                                              int64_t rows, int64_t cols, int64_t ld) {
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

// The threads of a block copy `n` words from `s` to `d`.
template <typename W>
__device__ __forceinline__ void ScatterCopy(const W* __restrict__ s, W* __restrict__ d,
                                            uint64_t n) {
  for (uint64_t j = threadIdx.x; j < n; j += blockDim.x) d[j] = s[j];
}

#endif  // !PTD_CUDA_PREBUILT_KERNELS

constexpr int kScatterThreads = 256;
constexpr uint64_t kMaxScatterBlocks = 65535;  // Then grid-stride over the entries.

}  // namespace

// The entry points: one gather and one transpose per word type W, named
// ptd_gather_wN / ptd_transpose_wN for N-byte words. With prebuilt kernels
// only their declarations are compiled here (the launch needs their types).
#if defined(PTD_CUDA_PREBUILT_KERNELS)
#define PTD_KERNEL_BODY(...) ;
#else
#define PTD_KERNEL_BODY(...) __VA_ARGS__
#endif
// clang-format off
#define PTD_DEFINE_WORD_KERNELS(W, N)                                                    \
  extern "C" __global__ void ptd_gather_w##N(                                            \
      const W* __restrict__ src, W* __restrict__ dst, uint64_t numel,                    \
      const GatherGeometry geometry)                                                     \
      PTD_KERNEL_BODY({ GatherBody<W>(src, dst, numel, geometry); })                     \
  extern "C" __global__ void ptd_transpose_w##N(                                         \
      const W* __restrict__ src, W* __restrict__ dst, int64_t rows, int64_t cols,        \
      int64_t ld)                                                                        \
      PTD_KERNEL_BODY({ TransposeBody<W>(src, dst, rows, cols, ld); })
// clang-format on
PTD_DEFINE_WORD_KERNELS(uint8_t, 1)
PTD_DEFINE_WORD_KERNELS(uint16_t, 2)
PTD_DEFINE_WORD_KERNELS(uint32_t, 4)
PTD_DEFINE_WORD_KERNELS(uint64_t, 8)
#undef PTD_DEFINE_WORD_KERNELS

// The scatter of a staged block: a block of threads per entry (grid-stride),
// its bytes copied one a thread. Destinations are offsets from one base (a
// pointer parameter) rather than pointers in the table.
extern "C" __global__ void ptd_scatter(const uint8_t* __restrict__ src,
                                       const ScatterEntry* __restrict__ table, uint64_t count,
                                       uint8_t* __restrict__ dst_base) PTD_KERNEL_BODY({
  for (uint64_t i = blockIdx.x; i < count; i += gridDim.x) {
    const ScatterEntry e = table[i];
    const uint8_t* s = src + e.src_offset;
    uint8_t* d = dst_base + e.dst_offset;
    // The widest word that divides both offsets and the length (both bases
    // are at least 64-byte aligned: device scratch, a storage).
    const uint64_t all = e.src_offset | e.dst_offset | e.nbytes;
    if (all % 8 == 0) {
      ScatterCopy(reinterpret_cast<const uint64_t*>(s), reinterpret_cast<uint64_t*>(d),
                  e.nbytes / 8);
    } else if (all % 4 == 0) {
      ScatterCopy(reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint32_t*>(d),
                  e.nbytes / 4);
    } else {
      ScatterCopy(s, d, e.nbytes);
    }
  }
})
#undef PTD_KERNEL_BODY

// A launch sets the last error only when it fails: each launcher clears what
// an earlier, ignored failure left there, so that its check reports its own.
#define PTD_GATHER_CASE(W, N)                                            \
  case N:                                                                \
    PTD_LAUNCH(ptd_gather_w##N, blocks, kGatherThreads, 0, stream)       \
    (static_cast<const W*>(src), static_cast<W*>(dst), numel, geometry); \
    break;
#define PTD_TRANSPOSE_CASE(W, N)                                            \
  case N:                                                                   \
    PTD_LAUNCH(ptd_transpose_w##N, grid, dim3(kTile, kTileRows), 0, stream) \
    (static_cast<const W*>(src), static_cast<W*>(dst), rows, cols, ld);     \
    break;

    cudaError_t LaunchGather(const void* src, void* dst, uint64_t numel, uint32_t word_size,
                             const GatherGeometry& geometry, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(
      std::min<uint64_t>((numel + kGatherThreads - 1) / kGatherThreads, kMaxGatherBlocks));
  (void)cudaGetLastError();
  switch (word_size) {
    PTD_GATHER_CASE(uint8_t, 1)
    PTD_GATHER_CASE(uint16_t, 2)
    PTD_GATHER_CASE(uint32_t, 4)
    PTD_GATHER_CASE(uint64_t, 8)
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchTranspose(const void* src, void* dst, int64_t rows, int64_t cols, int64_t ld,
                            uint32_t word_size, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(std::min((cols + kTile - 1) / kTile, kMaxGridX)),
                  static_cast<unsigned>(std::min((rows + kTile - 1) / kTile, kMaxGridY)));
  (void)cudaGetLastError();
  switch (word_size) {
    PTD_TRANSPOSE_CASE(uint8_t, 1)
    PTD_TRANSPOSE_CASE(uint16_t, 2)
    PTD_TRANSPOSE_CASE(uint32_t, 4)
    PTD_TRANSPOSE_CASE(uint64_t, 8)
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchScatter(const void* src, const ScatterEntry* table, uint64_t count,
                          void* dst_base, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min(count, kMaxScatterBlocks));
  (void)cudaGetLastError();
  PTD_LAUNCH(ptd_scatter, blocks, kScatterThreads, 0, stream)
  (static_cast<const uint8_t*>(src), table, count, static_cast<uint8_t*>(dst_base));
  return cudaGetLastError();
}

#undef PTD_GATHER_CASE
#undef PTD_TRANSPOSE_CASE

}  // namespace ptd::internal
