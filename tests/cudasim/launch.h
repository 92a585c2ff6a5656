// What a kernel launch needs from the simulator's runtime (cudasim.cc):
// used by the launch helper in kernel_prelude.h.
#ifndef PTD_TESTS_CUDASIM_LAUNCH_H_
#define PTD_TESTS_CUDASIM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace cudasim::internal {

// Limits checked at launch (an H100's; kernel parameters at the portable
// 4 KiB, stricter than the 32,764 bytes CUDA 12.1+ allows on sm_70+).
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 0x7fffffffu, kMaxGridDimY = 65535, kMaxGridDimZ = 65535;
inline constexpr size_t kMaxDynamicSharedBytes = 48 * 1024;  // Without opt-in.
inline constexpr size_t kMaxParamBytes = 4096;

// A launch of `name` (for messages) on `stream`: checks the configuration
// and the stream (cudaErrorInvalidConfiguration, cudaErrorInvalidValue,
// cudaErrorInvalidResourceHandle for a stream of another device), sets the
// calling thread's last error as a <<<...>>> launch does, and on success
// enqueues the grid: `body` runs once per kernel thread (RunGrid) when the
// stream reaches it. Returns the launch's error.
cudaError_t EnqueueKernel(const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                          cudaStream_t stream, size_t param_bytes, std::function<void()> body);

// A kernel's view of pointer argument `p`, translated at launch for a kernel
// on `stream`'s device: device memory of that device -> the engines' mapping
// of it; pinned host memory -> itself; null -> null; anything else (pageable
// host memory, another device's memory) -> an address that faults when the
// kernel touches it (unless Check::kKernelHostAccess is disabled).
void* KernelPointer(cudaStream_t stream, const void* p);

}  // namespace cudasim::internal

#endif  // PTD_TESTS_CUDASIM_LAUNCH_H_
