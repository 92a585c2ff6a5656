// What a .cu file needs to compile as C++ in the simulator build, included
// before it (see gather_kernels_sim.cc). The same source then runs on the
// kernel engine (kernel_exec.h): no kernel is written twice.
//
// - __global__, __device__, __host__ mean nothing: kernels and device
//   functions become plain functions.
// - __shared__ is `static thread_local`: the threads of a block are fibers
//   of one OS thread (and blocks run one after another there), so they share
//   it; blocks on other OS threads (other streams) have their own. Like
//   shared memory, it is not cleared between blocks. Dynamic shared memory
//   (`extern __shared__`) is not supported.
// - threadIdx, blockIdx, blockDim, gridDim read the running kernel thread;
//   __syncthreads() is the engine's barrier.
// - PTD_CUDASIM_LAUNCH(kernel, grid, block, shmem, stream)(args...) is the
//   launch (runtime/cuda/internal/kernel_launch.h's PTD_LAUNCH maps onto it).
//
// Limits: pointers inside struct arguments are not translated (only
// pointer-typed parameters are), and a thread that spins on another thread
// of its block never yields to it: the engine runs a thread until it exits or
// reaches a barrier.
#ifndef PTD_TESTS_CUDASIM_KERNEL_PRELUDE_H_
#define PTD_TESTS_CUDASIM_KERNEL_PRELUDE_H_

#ifdef __CUDACC__
#error "kernel_prelude.h is for the simulator build (a host compiler), not nvcc"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "tests/cudasim/kernel_exec.h"
#include "tests/cudasim/launch.h"

// crt/host_defines.h (through cuda_runtime_api.h) defines these for a host
// compiler already, mostly as nothing; make each what the simulator needs.
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static thread_local

#define threadIdx (::cudasim::internal::CurrentKernelThread().thread_idx)
#define blockIdx (::cudasim::internal::CurrentKernelThread().block_idx)
#define blockDim (::cudasim::internal::CurrentKernelThread().block_dim)
#define gridDim (::cudasim::internal::CurrentKernelThread().grid_dim)
#define __syncthreads() ::cudasim::internal::SyncThreads()

// Tells runtime/cuda/internal/kernel_launch.h to launch through the simulator.
#define PTD_CUDASIM_KERNELS 1

namespace cudasim::internal {

// The size of a kernel's parameter buffer: the parameters laid out in order,
// each at its alignment, as the CUDA ABI lays them out.
template <typename... Params>
constexpr size_t KernelParamBytes() {
  size_t bytes = 0;
  ((bytes = (bytes + alignof(Params) - 1) / alignof(Params) * alignof(Params) + sizeof(Params)),
   ...);
  return bytes;
}

// Argument `value` of parameter type `Param` as the kernel sees it.
template <typename Param>
Param KernelArgument(cudaStream_t stream, Param value) {
  static_assert(!std::is_reference_v<Param>, "a kernel parameter cannot be a reference");
  // The launch copies the bytes of each argument; anything needing a copy
  // constructor would behave differently on the device.
  static_assert(std::is_trivially_copyable_v<Param>,
                "a kernel parameter must be trivially copyable");
  if constexpr (std::is_pointer_v<Param>) {
    using Pointee = std::remove_cv_t<std::remove_pointer_t<Param>>;
    static_assert(!std::is_function_v<Pointee>, "host function pointers mean nothing to a kernel");
    return static_cast<Param>(KernelPointer(stream, const_cast<Pointee*>(value)));
  } else {
    return value;
  }
}

// What PTD_CUDASIM_LAUNCH(...) evaluates to: calling it with the kernel's
// arguments launches. Arguments convert to the parameter types as in a
// call; the body holds the converted, translated values, so it is
// independent of the caller's variables once the launch returns.
template <typename... Params>
class KernelLauncher {
 public:
  KernelLauncher(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block,
                 size_t dynamic_shared_bytes, cudaStream_t stream)
      : kernel_(kernel),
        name_(name),
        grid_(grid),
        block_(block),
        dynamic_shared_bytes_(dynamic_shared_bytes),
        stream_(stream) {}

  // Returns nothing, as <<<...>>>: the error is the thread's last error.
  void operator()(Params... args) const {
    const std::tuple<Params...> arguments(KernelArgument<Params>(stream_, args)...);
    void (*const kernel)(Params...) = kernel_;
    (void)EnqueueKernel(name_, grid_, block_, dynamic_shared_bytes_, stream_,
                        KernelParamBytes<Params...>(),
                        [kernel, arguments] { std::apply(kernel, arguments); });
  }

 private:
  void (*kernel_)(Params...);
  const char* name_;
  dim3 grid_;
  dim3 block_;
  size_t dynamic_shared_bytes_;
  cudaStream_t stream_;
};

template <typename... Params>
KernelLauncher<Params...> MakeKernelLauncher(void (*kernel)(Params...), const char* name, dim3 grid,
                                             dim3 block, size_t dynamic_shared_bytes,
                                             cudaStream_t stream) {
  return KernelLauncher<Params...>(kernel, name, grid, block, dynamic_shared_bytes, stream);
}

}  // namespace cudasim::internal

// kernel<<<grid, block, shmem, stream>>>(args...) is
// PTD_CUDASIM_LAUNCH(kernel, grid, block, shmem, stream)(args...). A kernel
// name with a comma (Kernel<A, B>) needs parentheses around it.
#define PTD_CUDASIM_LAUNCH(kernel, grid, block, shmem, stream) \
  ::cudasim::internal::MakeKernelLauncher(kernel, #kernel, grid, block, shmem, stream)

#endif  // PTD_TESTS_CUDASIM_KERNEL_PRELUDE_H_
