// The kernel engine (kernel_exec.h). Each OS thread that runs grids keeps an
// Engine: a pool of fibers, one per thread of the largest block it has run,
// each on an mmap'ed stack with a guard page below it. A fiber loops: run
// `body` for the kernel thread it is handed, mark itself exited, switch back
// to the scheduler, wait to be handed the next block's thread. So a fiber
// and its stack are made once per OS thread, not once per kernel thread, and
// a switch is a handful of register moves (x86-64: the assembly below; other
// machines: swapcontext, which also costs a sigprocmask system call). 4096
// blocks of 256 threads with one barrier, -O2: 0.11 s with the assembly,
// 1.5 s with swapcontext. Each stack costs two mappings (guard and stack)
// and its touched pages, kept while the OS thread lives.
//
// The scheduler runs a block in rounds: every thread waiting to run, in a
// shuffled order drawn from the seed and the block's index, runs until it
// exits or reaches SyncThreads(). A round ends with every thread of the
// block either exited or at the barrier, which is the barrier's release
// condition (exited threads count as arrived, as on Volta and later), and
// the next round runs the waiting ones. Shuffling every round is what makes
// a missing barrier show: a thread reading a shared slot before its writer
// has run reads the slot's previous contents.
//
// Sanitizers: under ASan every switch is bracketed by
// __sanitizer_start_switch_fiber/__sanitizer_finish_switch_fiber (ASan must
// know which stack is live, or it reports the fiber stacks as overflows);
// under TSan each fiber is a TSan fiber and every switch a happens-before
// edge (flags 0), since the threads of a block really do run one after
// another.
#include "tests/cudasim/kernel_exec.h"

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tests/cudasim/cudasim.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTD_CUDASIM_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define PTD_CUDASIM_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(PTD_CUDASIM_ASAN)
#define PTD_CUDASIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(PTD_CUDASIM_TSAN)
#define PTD_CUDASIM_TSAN 1
#endif

#ifdef PTD_CUDASIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef PTD_CUDASIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// PTD_CUDASIM_UCONTEXT forces the portable switch (to test it on x86-64).
#if defined(__x86_64__) && defined(__linux__) && !defined(PTD_CUDASIM_UCONTEXT)
#define PTD_CUDASIM_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#ifdef PTD_CUDASIM_ASM_SWITCH
// ptd_cudasim_switch(save, load): saves the System V callee-saved state
// (rbx, rbp, r12-r15, the MXCSR and x87 control words) on the current
// stack, stores the stack pointer in *save, and resumes the context whose
// stack pointer is `load`. Everything else is caller-saved, so the compiler
// has already spilled it at the call. No signal mask is switched: fibers
// never change it.
//
// ptd_cudasim_fiber_start: where a new fiber's first switch returns to (see
// MakeContext): calls r13(r12) and never returns. Its CFI marks it the
// outermost frame, so unwinders stop there.
__asm__(
    ".text\n"
    ".globl ptd_cudasim_switch\n"
    ".hidden ptd_cudasim_switch\n"
    ".type ptd_cudasim_switch, @function\n"
    ".p2align 4\n"
    "ptd_cudasim_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size ptd_cudasim_switch, .-ptd_cudasim_switch\n"
    ".globl ptd_cudasim_fiber_start\n"
    ".hidden ptd_cudasim_fiber_start\n"
    ".type ptd_cudasim_fiber_start, @function\n"
    ".p2align 4\n"
    "ptd_cudasim_fiber_start:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined rip\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    "  .cfi_endproc\n"
    ".size ptd_cudasim_fiber_start, .-ptd_cudasim_fiber_start\n");

extern "C" void ptd_cudasim_switch(void** save, void* load);
extern "C" void ptd_cudasim_fiber_start();
#endif  // PTD_CUDASIM_ASM_SWITCH

namespace cudasim::internal {
namespace {

// 256 KiB: a kernel's frames are small, but ASan's redzones and
// instrumentation multiply them. MAP_NORESERVE: only touched pages cost.
constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kGuardBytes = size_t{4} << 10;  // Below the stack: overflow faults.
// Above any real block (1024 threads); a guard against a runaway RunGrid.
constexpr uint64_t kMaxFibers = uint64_t{1} << 16;

[[noreturn]] void Die(const char* message) {
  std::fprintf(stderr, "cudasim: %s\n", message);
  std::abort();
}

class Engine;

struct Fiber {
  enum class State { kRunning, kAtBarrier, kExited };

#ifdef PTD_CUDASIM_ASM_SWITCH
  void* sp = nullptr;  // Saved stack pointer while switched out.
#else
  ucontext_t context;
#endif
  Engine* engine = nullptr;
  char* mapping = nullptr;  // Guard page, then the stack.
  char* stack = nullptr;    // Lowest usable address.
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
  State state = State::kExited;
};

// The kernel thread and fiber running now on this OS thread (null in the
// scheduler). Plain pointers: no thread_local wrapper on the hot path.
thread_local const KernelThread* t_current = nullptr;
thread_local Fiber* t_fiber = nullptr;

// SplitMix64: the source of the threads' running order; ample for a
// shuffle, and a few instructions a draw.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }
  // In [0, n), n <= 2^32 (multiply-shift; its bias is irrelevant here).
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(((Next() >> 32) * n) >> 32); }

 private:
  uint64_t state_;
};

class Engine {
 public:
  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  void Run(dim3 grid, dim3 block, uint64_t seed, const std::function<void()>& body);

  // Fiber side: back to the scheduler (at a barrier or after exiting).
  void Yield(Fiber* fiber);
  bool barrier_enabled() const { return barrier_enabled_; }

 private:
  void Grow(size_t count);
  void RunBlock(uint32_t threads, Random& random);
  // Scheduler side: runs `fiber` until it yields.
  void Resume(Fiber* fiber);
  [[noreturn]] static void Main(Fiber* fiber) noexcept;
#ifndef PTD_CUDASIM_ASM_SWITCH
  static void UcontextMain(unsigned high, unsigned low);
#endif

#ifdef PTD_CUDASIM_ASM_SWITCH
  void* scheduler_sp_ = nullptr;
#else
  ucontext_t scheduler_context_;
#endif
#ifdef PTD_CUDASIM_ASAN
  // The scheduler's stack, as ASan reported it at the last switch from it.
  const void* scheduler_stack_ = nullptr;
  size_t scheduler_stack_bytes_ = 0;
  void* scheduler_asan_fake_stack_ = nullptr;
#endif
#ifdef PTD_CUDASIM_TSAN
  void* scheduler_tsan_fiber_ = nullptr;
#endif

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<KernelThread> threads_;  // Of the block running now.
  std::vector<uint32_t> order_, waiting_;
  const std::function<void()>* body_ = nullptr;
  bool barrier_enabled_ = true;
  bool running_ = false;
  bool quit_ = false;  // Fibers leave their loop (at destruction).
};

Engine& ThisThreadEngine() {
  thread_local Engine engine;
  return engine;
}

Engine::~Engine() {
  // Let every fiber leave its loop, so that ASan frees its fake stack and
  // TSan its state, then unmap the stacks.
  quit_ = true;
#ifdef PTD_CUDASIM_TSAN
  scheduler_tsan_fiber_ = __tsan_get_current_fiber();
#endif
  for (auto& fiber : fibers_) {
    Resume(fiber.get());
#ifdef PTD_CUDASIM_TSAN
    __tsan_destroy_fiber(fiber->tsan_fiber);
#endif
#ifdef PTD_CUDASIM_ASAN
    // The fiber's last frames leave poisoned shadow behind; a later mapping
    // at these addresses must not inherit it.
    __asan_unpoison_memory_region(fiber->stack, kStackBytes);
#endif
    munmap(fiber->mapping, kGuardBytes + kStackBytes);
  }
}

void Engine::Grow(size_t count) {
  fibers_.reserve(count);
  while (fibers_.size() < count) {
    auto fiber = std::make_unique<Fiber>();
    fiber->engine = this;
    void* mapping = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapping == MAP_FAILED) Die("cannot map a fiber stack");
    if (mprotect(mapping, kGuardBytes, PROT_NONE) != 0) Die("cannot protect a fiber stack's guard");
    fiber->mapping = static_cast<char*>(mapping);
    fiber->stack = fiber->mapping + kGuardBytes;
#ifdef PTD_CUDASIM_ASM_SWITCH
    // The frame ptd_cudasim_switch pops: control words, r15..r12, rbx, rbp,
    // then the return address. fiber_start then runs with rsp at the (page
    // aligned) top of the stack, so its call gives Main the ABI's entry
    // alignment. rbp = 0 ends frame-pointer chains.
    auto* const slot = reinterpret_cast<uint64_t*>(fiber->stack + kStackBytes);
    uint32_t mxcsr;
    uint16_t fpu_control;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpu_control));
    slot[-1] = reinterpret_cast<uint64_t>(&ptd_cudasim_fiber_start);
    slot[-2] = 0;                                          // rbp
    slot[-3] = 0;                                          // rbx
    slot[-4] = reinterpret_cast<uint64_t>(fiber.get());    // r12: Main's argument.
    slot[-5] = reinterpret_cast<uint64_t>(&Engine::Main);  // r13: called.
    slot[-6] = 0;                                          // r14
    slot[-7] = 0;                                          // r15
    slot[-8] = uint64_t{mxcsr} | uint64_t{fpu_control} << 32;
    fiber->sp = &slot[-8];
#else
    if (getcontext(&fiber->context) != 0) Die("getcontext failed");
    fiber->context.uc_stack.ss_sp = fiber->stack;
    fiber->context.uc_stack.ss_size = kStackBytes;
    fiber->context.uc_link = nullptr;
    const auto address = reinterpret_cast<uintptr_t>(fiber.get());
    // makecontext passes int arguments: the pointer goes in two halves.
    makecontext(&fiber->context, reinterpret_cast<void (*)()>(&Engine::UcontextMain), 2,
                static_cast<unsigned>(address >> 32), static_cast<unsigned>(address));
#endif
#ifdef PTD_CUDASIM_TSAN
    fiber->tsan_fiber = __tsan_create_fiber(0);
#endif
    fibers_.push_back(std::move(fiber));
  }
}

void Engine::Resume(Fiber* fiber) {
  fiber->state = Fiber::State::kRunning;
#ifdef PTD_CUDASIM_TSAN
  __tsan_switch_to_fiber(fiber->tsan_fiber, 0);
#endif
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_start_switch_fiber(&scheduler_asan_fake_stack_, fiber->stack, kStackBytes);
#endif
#ifdef PTD_CUDASIM_ASM_SWITCH
  ptd_cudasim_switch(&scheduler_sp_, fiber->sp);
#else
  if (swapcontext(&scheduler_context_, &fiber->context) != 0) Die("swapcontext failed");
#endif
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(scheduler_asan_fake_stack_, nullptr, nullptr);
#endif
}

void Engine::Yield(Fiber* fiber) {
#ifdef PTD_CUDASIM_TSAN
  __tsan_switch_to_fiber(scheduler_tsan_fiber_, 0);
#endif
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_start_switch_fiber(&fiber->asan_fake_stack, scheduler_stack_, scheduler_stack_bytes_);
#endif
#ifdef PTD_CUDASIM_ASM_SWITCH
  ptd_cudasim_switch(&fiber->sp, scheduler_sp_);
#else
  if (swapcontext(&fiber->context, &scheduler_context_) != 0) Die("swapcontext failed");
#endif
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(fiber->asan_fake_stack, &scheduler_stack_,
                                  &scheduler_stack_bytes_);
#endif
}

void Engine::Main(Fiber* fiber) noexcept {
  Engine* const engine = fiber->engine;
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &engine->scheduler_stack_,
                                  &engine->scheduler_stack_bytes_);
#endif
  while (!engine->quit_) {
    (*engine->body_)();
    fiber->state = Fiber::State::kExited;
    engine->Yield(fiber);
  }
  // Leave for good: a null save tells ASan to free this fiber's fake stack.
#ifdef PTD_CUDASIM_TSAN
  __tsan_switch_to_fiber(engine->scheduler_tsan_fiber_, 0);
#endif
#ifdef PTD_CUDASIM_ASAN
  __sanitizer_start_switch_fiber(nullptr, engine->scheduler_stack_, engine->scheduler_stack_bytes_);
#endif
#ifdef PTD_CUDASIM_ASM_SWITCH
  ptd_cudasim_switch(&fiber->sp, engine->scheduler_sp_);
#else
  setcontext(&engine->scheduler_context_);
#endif
  Die("a finished fiber was resumed");
}

#ifndef PTD_CUDASIM_ASM_SWITCH
void Engine::UcontextMain(unsigned high, unsigned low) {
  Main(reinterpret_cast<Fiber*>(uintptr_t{high} << 32 | uintptr_t{low}));
}
#endif

void Engine::RunBlock(uint32_t threads, Random& random) {
  order_.resize(threads);
  for (uint32_t i = 0; i < threads; ++i) order_[i] = i;
  while (!order_.empty()) {
    for (uint32_t i = static_cast<uint32_t>(order_.size()) - 1; i > 0; --i) {
      std::swap(order_[i], order_[random.Below(i + 1)]);
    }
    waiting_.clear();
    for (const uint32_t i : order_) {
      Fiber* const fiber = fibers_[i].get();
      t_current = &threads_[i];
      t_fiber = fiber;
      Resume(fiber);
      if (fiber->state == Fiber::State::kAtBarrier) waiting_.push_back(i);
    }
    t_current = nullptr;
    t_fiber = nullptr;
    // Every thread not exited is at the barrier now: release them.
    order_.swap(waiting_);
  }
}

void Engine::Run(dim3 grid, dim3 block, uint64_t seed, const std::function<void()>& body) {
  if (running_) Die("RunGrid called from inside a kernel");
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (threads > kMaxFibers) Die("RunGrid: block of more than 65536 threads");
  Grow(threads);
#ifdef PTD_CUDASIM_TSAN
  scheduler_tsan_fiber_ = __tsan_get_current_fiber();
#endif
  running_ = true;
  body_ = &body;
  // Read once per grid: Enabled() may lock, and a barrier is hit a million
  // times in a large grid.
  barrier_enabled_ = Enabled(Check::kBarrier);
  threads_.resize(threads);
  for (uint32_t z = 0, i = 0; z < block.z; ++z) {
    for (uint32_t y = 0; y < block.y; ++y) {
      for (uint32_t x = 0; x < block.x; ++x, ++i) {
        threads_[i].thread_idx = uint3{x, y, z};
        threads_[i].block_dim = block;
        threads_[i].grid_dim = grid;
      }
    }
  }
  uint64_t block_index = 0;
  for (uint32_t z = 0; z < grid.z; ++z) {
    for (uint32_t y = 0; y < grid.y; ++y) {
      for (uint32_t x = 0; x < grid.x; ++x, ++block_index) {
        for (KernelThread& thread : threads_) thread.block_idx = uint3{x, y, z};
        // Each block's order depends on the seed and the block only, so a
        // failure reproduces whatever ran before it on this OS thread.
        Random random(seed ^ (block_index * 0xd1342543de82ef95u));
        RunBlock(static_cast<uint32_t>(threads), random);
      }
    }
  }
  body_ = nullptr;
  running_ = false;
}

}  // namespace

const KernelThread& CurrentKernelThread() {
  const KernelThread* const thread = t_current;
  if (thread == nullptr) [[unlikely]] {
    Die("threadIdx/blockIdx/blockDim/gridDim read outside a kernel");
  }
  return *thread;
}

void RunGrid(dim3 grid, dim3 block, uint64_t seed, const std::function<void()>& body) {
  ThisThreadEngine().Run(grid, block, seed, body);
}

void SyncThreads() {
  Fiber* const fiber = t_fiber;
  if (fiber == nullptr) [[unlikely]] {
    Die("__syncthreads() called outside a kernel");
  }
  Engine* const engine = fiber->engine;
  if (!engine->barrier_enabled()) return;
  fiber->state = Fiber::State::kAtBarrier;
  engine->Yield(fiber);
}

}  // namespace cudasim::internal
