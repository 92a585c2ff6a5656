// PTD_LAUNCH(kernel, grid, block, shmem, stream)(args...): a kernel launch
// that compiles both with nvcc, where it is kernel<<<grid, block, shmem,
// stream>>>(args...), and in the CUDA simulator's build, where the .cu file
// is compiled as C++ after tests/cudasim/kernel_prelude.h and the launch
// goes to the simulator's kernel engine. So the simulator runs the very
// kernels the GPU runs. In a build whose kernels were compiled ahead of time
// (PTD_CUDA_PREBUILT_KERNELS: the CUDA 12 build of the GPU bundle, host code
// by the host compiler), the launch finds the kernel by its C name in the
// embedded images (prebuilt_kernels.h). Like <<<...>>>, the launch yields no
// value: its error is the thread's last error (cudaGetLastError()).
#ifndef PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_
#define PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_

#if defined(__CUDACC__)
#define PTD_LAUNCH(kernel, grid, block, shmem, stream) kernel<<<grid, block, shmem, stream>>>
#elif defined(PTD_CUDA_PREBUILT_KERNELS)
#include "runtime/cuda/internal/prebuilt_kernels.h"
// `kernel` is only declared here: decltype names its type without using it.
#define PTD_LAUNCH(kernel, grid, block, shmem, stream)                                          \
  ::ptd::internal::MakePrebuiltLauncher(static_cast<decltype(&kernel)>(nullptr), #kernel, grid, \
                                        block, shmem, stream)
#elif defined(PTD_CUDASIM_KERNELS)
#define PTD_LAUNCH(kernel, grid, block, shmem, stream) \
  PTD_CUDASIM_LAUNCH(kernel, grid, block, shmem, stream)
#else
#error \
    "a .cu file compiles with nvcc, as C++ through tests/cudasim/kernel_prelude.h, or with PTD_CUDA_PREBUILT_KERNELS"
#endif

#endif  // PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_
