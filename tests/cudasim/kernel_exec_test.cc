// Self-tests of the kernel engine (kernel_exec.h): tiny kernels, written in
// CUDA's kernel language through kernel_prelude.h, run on RunGrid directly.
// Each check of the engine has a test with a planted bug that only that
// check catches: run with PTD_CUDASIM_DISABLE=barrier, BarrierIsReal fails.
#include "tests/cudasim/kernel_exec.h"

#include <cstdint>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "tests/cudasim/cudasim.h"
#include "tests/cudasim/kernel_prelude.h"

namespace cudasim {
namespace {

using internal::RunGrid;

// ---- The kernels under test ----

constexpr unsigned kReverseThreads = 128;

// Reverses each block's slice of `src` through shared memory. Without the
// barrier a thread reads its partner's slot before the partner has written
// it whenever the partner runs later, and gets the slot's old contents (the
// previous block's value, or zero).
__global__ void ReverseKernel(const uint32_t* src, uint32_t* dst, bool with_barrier) {
  __shared__ uint32_t slots[kReverseThreads];
  const uint64_t base = uint64_t{blockIdx.x} * blockDim.x;
  slots[threadIdx.x] = src[base + threadIdx.x];
  if (with_barrier) __syncthreads();
  dst[base + threadIdx.x] = slots[blockDim.x - 1 - threadIdx.x];
}

// Counts each (block, thread) it runs as, and whether the indices and
// dimensions it reads are in range and the same after a barrier (the
// engine switches fibers there). Plain increments: a block's threads run
// one at a time.
__global__ void RecordIndexKernel(uint32_t* hits, uint32_t* errors, dim3 grid, dim3 block) {
  const uint3 t = threadIdx;
  const uint3 b = blockIdx;
  if (blockDim.x != block.x || blockDim.y != block.y || blockDim.z != block.z ||
      gridDim.x != grid.x || gridDim.y != grid.y || gridDim.z != grid.z || t.x >= block.x ||
      t.y >= block.y || t.z >= block.z || b.x >= grid.x || b.y >= grid.y || b.z >= grid.z) {
    ++*errors;
    return;
  }
  __syncthreads();
  if (threadIdx.x != t.x || threadIdx.y != t.y || threadIdx.z != t.z || blockIdx.x != b.x ||
      blockIdx.y != b.y || blockIdx.z != b.z) {
    ++*errors;
  }
  const uint64_t block_index = (uint64_t{b.z} * grid.y + b.y) * grid.x + b.x;
  const uint64_t thread_index = (uint64_t{t.z} * block.y + t.y) * block.x + t.x;
  ++hits[block_index * block.x * block.y * block.z + thread_index];
}

constexpr unsigned kEarlyThreads = 96;
constexpr uint32_t kNotWritten = 0xdeadbeef;

// Threads t % 3 == 0 exit at once, t % 3 == 1 after the first barrier, the
// rest pass two. A barrier that waited for exited threads would hang; one
// that let a thread pass early would show in `seen`.
__global__ void EarlyExitKernel(uint32_t* out) {
  __shared__ uint32_t arrived[kEarlyThreads];
  const unsigned t = threadIdx.x;
  const uint32_t mark = blockIdx.x + 1;
  if (t % 3 == 0) return;
  arrived[t] = mark;
  __syncthreads();
  uint32_t seen = 0;
  for (unsigned i = 0; i < kEarlyThreads; ++i) seen += arrived[i] == mark ? 1 : 0;
  out[blockIdx.x * kEarlyThreads + t] = seen;
  if (t % 3 == 1) return;
  __syncthreads();
  out[blockIdx.x * kEarlyThreads + t] += 1000;
}

// Records the order in which threads first run.
__global__ void OrderKernel(std::vector<uint32_t>* order) {
  order->push_back(threadIdx.x);
  __syncthreads();
}

// ---- Helpers ----

struct ReverseRun {
  std::vector<uint32_t> got;
  std::vector<uint32_t> want;
};

ReverseRun RunReverse(bool with_barrier, unsigned blocks, uint64_t seed) {
  const size_t n = size_t{blocks} * kReverseThreads;
  std::vector<uint32_t> src(n), dst(n, kNotWritten);
  ReverseRun run;
  run.want.resize(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint32_t>(i + 1);
  for (size_t i = 0; i < n; ++i) {
    const size_t block = i / kReverseThreads;
    run.want[i] = src[block * kReverseThreads + kReverseThreads - 1 - i % kReverseThreads];
  }
  const uint32_t* const in = src.data();
  uint32_t* const out = dst.data();
  RunGrid(dim3(blocks), dim3(kReverseThreads), seed,
          [in, out, with_barrier] { ReverseKernel(in, out, with_barrier); });
  run.got = std::move(dst);
  return run;
}

size_t Mismatches(const ReverseRun& run) {
  size_t count = 0;
  for (size_t i = 0; i < run.got.size(); ++i) count += run.got[i] != run.want[i] ? 1 : 0;
  return count;
}

// ---- Tests ----

TEST(KernelExecTest, BarrierIsReal) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    // Fails under PTD_CUDASIM_DISABLE=barrier: that the barrier check is what
    // makes this kernel right.
    EXPECT_EQ(Mismatches(RunReverse(/*with_barrier=*/true, 8, seed)), 0u) << "seed " << seed;
    // The planted bug: of each pair of partner threads, the one that runs
    // first reads a slot not yet written, whatever the order.
    EXPECT_GE(Mismatches(RunReverse(/*with_barrier=*/false, 8, seed)), 8u * kReverseThreads / 2)
        << "seed " << seed;
  }
}

// Check::kBarrier off makes __syncthreads() return at once, so the correct
// kernel goes wrong. In a child process: cudasim.h has no way to turn a
// check back on, and the other tests need it.
TEST(KernelExecDeathTest, WithoutTheBarrierCheckTheBarrierKernelGoesWrong) {
  // Re-executed, not forked: the simulator's other tests leave engine
  // threads (and perhaps a held lock) behind in this process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Disable(Check::kBarrier);
        const size_t wrong = Mismatches(RunReverse(/*with_barrier=*/true, 8, 1));
        std::exit(wrong >= 8u * kReverseThreads / 2 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(KernelExecTest, IndicesCoverA3DGridAnd3DBlockOnce) {
  const dim3 grid(3, 2, 4);
  const dim3 block(4, 3, 5);
  const size_t threads = size_t{grid.x} * grid.y * grid.z * block.x * block.y * block.z;
  std::vector<uint32_t> hits(threads, 0);
  uint32_t errors = 0;
  uint32_t* const hits_data = hits.data();
  uint32_t* const errors_data = &errors;
  RunGrid(grid, block, /*seed=*/7, [=] { RecordIndexKernel(hits_data, errors_data, grid, block); });
  EXPECT_EQ(errors, 0u);
  for (size_t i = 0; i < threads; ++i) ASSERT_EQ(hits[i], 1u) << "thread " << i;
}

TEST(KernelExecTest, ExitedThreadsCountAsArrived) {
  constexpr unsigned kBlocks = 4;
  std::vector<uint32_t> out(kBlocks * kEarlyThreads, kNotWritten);
  uint32_t* const data = out.data();
  RunGrid(dim3(kBlocks), dim3(kEarlyThreads), /*seed=*/3, [data] { EarlyExitKernel(data); });
  constexpr uint32_t kSurvivors = kEarlyThreads - kEarlyThreads / 3;  // Reach the first barrier.
  for (unsigned i = 0; i < out.size(); ++i) {
    const unsigned t = i % kEarlyThreads;
    const uint32_t want = t % 3 == 0 ? kNotWritten : t % 3 == 1 ? kSurvivors : kSurvivors + 1000;
    ASSERT_EQ(out[i], want) << "block " << i / kEarlyThreads << " thread " << t;
  }
}

TEST(KernelExecTest, LoneSurvivorPassesItsBarriers) {
  int passed = 0;
  RunGrid(dim3(2), dim3(64), /*seed=*/5, [&passed] {
    if (threadIdx.x != 17) return;
    for (int i = 0; i < 3; ++i) __syncthreads();
    ++passed;
  });
  EXPECT_EQ(passed, 2);
}

TEST(KernelExecTest, OrderIsShuffledAndReproducible) {
  auto order = [](uint64_t seed) {
    std::vector<uint32_t> seen;
    std::vector<uint32_t>* const out = &seen;
    RunGrid(dim3(1), dim3(64), seed, [out] { OrderKernel(out); });
    return seen;
  };
  const std::vector<uint32_t> first = order(11);
  ASSERT_EQ(first.size(), 64u);
  EXPECT_EQ(std::set<uint32_t>(first.begin(), first.end()).size(), 64u);
  EXPECT_EQ(order(11), first);
  EXPECT_NE(order(12), first);
  std::vector<uint32_t> in_order(64);
  for (uint32_t i = 0; i < 64; ++i) in_order[i] = i;
  EXPECT_NE(first, in_order);
}

TEST(KernelExecTest, EmptyGridRunsNothing) {
  int runs = 0;
  RunGrid(dim3(0), dim3(32), 1, [&runs] { ++runs; });
  RunGrid(dim3(4), dim3(32, 0), 1, [&runs] { ++runs; });
  EXPECT_EQ(runs, 0);
}

TEST(KernelExecTest, ParamBytesFollowTheAbi) {
  struct Geometry {
    int32_t rank;
    int64_t sizes[4];
  };
  static_assert(internal::KernelParamBytes<>() == 0);
  static_assert(internal::KernelParamBytes<char, double, char>() == 17);
  static_assert(internal::KernelParamBytes<const void*, uint32_t, Geometry>() == 8 + 8 + 40);
}

TEST(KernelExecDeathTest, BuiltinsOutsideAKernelAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)threadIdx.x, "outside a kernel");
  EXPECT_DEATH(__syncthreads(), "outside a kernel");
}

// Deep enough to pass any fiber stack: the guard page below it faults.
int Recurse(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) return frame[0];
  return Recurse(depth - 1) + frame[0];
}

TEST(KernelExecDeathTest, StackOverflowFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Exit status 0, which is not a death, if the recursion ever returned.
  EXPECT_DEATH(RunGrid(dim3(1), dim3(1), 1,
                       [] {
                         (void)Recurse(1 << 20);
                         std::exit(0);
                       }),
               "");
}

}  // namespace
}  // namespace cudasim
