// PTD_LAUNCH(kernel, grid, block, shmem, stream)(args...): a kernel launch
// that compiles both with nvcc, where it is kernel<<<grid, block, shmem,
// stream>>>(args...), and in the CUDA simulator's build, where the .cu file
// is compiled as C++ after tests/cudasim/kernel_prelude.h and the launch
// goes to the simulator's kernel engine. So the simulator runs the very
// kernels the GPU runs. Like <<<...>>>, the launch yields no value: its
// error is the thread's last error (cudaGetLastError()).
#ifndef PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_
#define PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_

#if defined(__CUDACC__)
#define PTD_LAUNCH(kernel, grid, block, shmem, stream) kernel<<<grid, block, shmem, stream>>>
#elif defined(PTD_CUDASIM_KERNELS)
#define PTD_LAUNCH(kernel, grid, block, shmem, stream) \
  PTD_CUDASIM_LAUNCH(kernel, grid, block, shmem, stream)
#else
#error "a .cu file compiles with nvcc, or as C++ through tests/cudasim/kernel_prelude.h"
#endif

#endif  // PTD_CUDA_INTERNAL_KERNEL_LAUNCH_H_
