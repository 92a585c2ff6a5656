// The simulator's kernel engine: runs a kernel's grid on the CPU, every
// thread of a block on a fiber of its own, with __syncthreads() a real
// barrier among the threads of the block. Used by the launch helper of
// kernel_prelude.h through cudasim::internal::EnqueueKernel (cudasim.cc).
#ifndef PTD_TESTS_CUDASIM_KERNEL_EXEC_H_
#define PTD_TESTS_CUDASIM_KERNEL_EXEC_H_

#include <cuda_runtime_api.h>  // dim3, uint3

#include <cstdint>
#include <functional>

namespace cudasim::internal {

struct KernelThread {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The kernel thread running now on this OS thread. Aborts with a message
// outside a kernel.
const KernelThread& CurrentKernelThread();

// Runs `body` once for every thread of every block of the grid. The threads
// of a block run on fibers of one OS thread (the caller's), one at a time,
// in an order drawn from `seed`: each runs until it finishes or reaches
// SyncThreads(), and no thread passes a barrier before every thread of its
// block that has not exited has reached it. Blocks run one after another.
// With Check::kBarrier disabled, SyncThreads() returns at once.
void RunGrid(dim3 grid, dim3 block, uint64_t seed, const std::function<void()>& body);

// __syncthreads(): the barrier of the calling kernel thread's block.
void SyncThreads();

}  // namespace cudasim::internal

#endif  // PTD_TESTS_CUDASIM_KERNEL_EXEC_H_
