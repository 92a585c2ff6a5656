// cudasim: a CUDA runtime simulator, for the tests only. It takes the place
// of the CUDA runtime library (cudart) in the simulator build of runtime/cuda
// (ptd_cuda_sim), of the gpu tests (ptd_cuda_sim_tests) and of
// ptd-load-cudasim, and implements the runtime calls the project makes with
// CUDA's documented semantics, as strictly as the hardware:
//
// - Device memory is not host memory: each device's addresses are reserved
//   PROT_NONE in this process, so a host dereference of a device pointer
//   dies at once (SIGSEGV); the copy and kernel engines reach the bytes
//   through a second mapping. A kernel may touch device memory of its own
//   device and pinned host memory (cudaHostAlloc: unified addressing); a
//   pointer to pageable host memory, or to another device, reaches the
//   kernel as an address that faults.
// - Streams are asynchronous: a call enqueues and returns; each stream's
//   operations run in order on an engine thread of their own, each after a
//   seeded random delay. Copies read their source when they run.
// - Host-to-device copies from pageable memory behave as cudaMemcpy is
//   documented to: the stream is synchronized, the source is staged before
//   the call returns, and the device write happens later, in stream order.
//   Device-to-host copies into pageable memory are synchronous.
// - The legacy default stream (0) synchronizes with the device's blocking
//   streams; cudaStreamNonBlocking streams do not. cudaFree and cudaFreeHost
//   synchronize implicitly.
// - Errors as CUDA reports them (launch configuration, device ordinals, out
//   of memory past the configured capacity, sticky errors, the per-thread
//   last error) and injected faults.
//
// Configuration (read at the first call): PTD_CUDASIM_DEVICES (default 1),
// PTD_CUDASIM_CAPACITY (bytes per device, K/M/G/T suffixes, default 80G),
// PTD_CUDASIM_SEED (default 1), PTD_CUDASIM_MAX_DELAY_US (default 200),
// PTD_CUDASIM_DISABLE (a comma-separated list of Check names below, for the
// self-tests' proof that each check is what catches its bug; never set it
// otherwise).
#ifndef PTD_TESTS_CUDASIM_CUDASIM_H_
#define PTD_TESTS_CUDASIM_CUDASIM_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>

namespace cudasim {

struct Config {
  int devices = 1;
  uint64_t capacity = uint64_t{80} << 30;  // Bytes of device memory per device.
  uint64_t seed = 1;                       // Of the engines' random delays.
  uint32_t max_delay_us = 200;             // Upper bound of one random delay.
  // Host memory cudaHostAlloc may pin in all, as the driver bounds it; 0:
  // the machine's physical memory.
  uint64_t pinned_limit = 0;
  // Device memory the CUDA context holds on a real card (a few hundred MiB):
  // cudaMemGetInfo's free starts this far below the total, and cudaMalloc
  // cannot have it. At most an eighth of the capacity, so that a small
  // simulated device stays usable.
  uint64_t context_reserve = uint64_t{384} << 20;
};

// The configuration in force (from the environment at the first call).
Config CurrentConfig();
// Replaces the configuration. Fails (returns false) while any device memory,
// pinned memory, stream or event is live.
bool Configure(const Config& config);

// Checks that a self-test may turn off (PTD_CUDASIM_DISABLE or Disable()) to
// show that it fails without them.
enum class Check {
  kDeviceMemoryProtection,  // "protect": device addresses are PROT_NONE to the host.
  kAsync,                   // "async": operations run later, on engine threads.
  kStreamWaitEvent,         // "wait_event": cudaStreamWaitEvent orders its stream.
  kLegacyStreamSync,        // "legacy_sync": the legacy default stream's implicit sync.
  kFreeSync,                // "free_sync": cudaFree/cudaFreeHost synchronize (CI runs
                            // the cudasim label with it off too).
  kLaunchConfig,            // "launch_config": launch configuration limits.
  kDeviceOrdinal,           // "ordinal": device ordinals are checked.
  kCapacity,                // "capacity": allocation past the capacity fails.
  kSticky,                  // "sticky": sticky errors stay.
  kBarrier,                 // "barrier": __syncthreads() is a barrier.
  kKernelHostAccess,        // "kernel_host": kernels cannot touch pageable memory.
  kPageableD2HSync,         // "pageable_d2h": D2H into pageable memory is synchronous.
  kPendingFree,             // "pending_free": with free_sync off, freeing memory that a
                            // pending copy reads or writes ends the process.
  kPin,                     // "pin": cudaHostAlloc pins (populates) every page when
                            // called, and fails past Config::pinned_limit.
  kContextReserve,          // "context": the context holds Config::context_reserve.
  kMisaligned,              // "misaligned": a kernel's load or store of a word at an
                            // address that is not a multiple of its size ends the
                            // process, as cudaErrorMisalignedAddress ends a kernel on
                            // the GPU (UBSan's alignment check, compiled into every
                            // simulated kernel; off, it reports and goes on).
};
const char* CheckName(Check check);
bool Enabled(Check check);
void Disable(Check check);
void Enable(Check check);  // A test's own Disable undone.

// Calls of a runtime API ("cudaMemcpyAsync", ...) made so far; launches of
// one kernel are "kernel:NAME" (the name its launch gives, ptd_gather_w4).
uint64_t CallCount(const std::string& api);
void ResetCallCounts();

// Fault injection: the `n`th call (1-based, counted from now) of `api` fails
// with `error` and has no effect. A sticky error (cudaErrorIllegalAddress,
// cudaErrorLaunchFailure, ...) then stays on the current device: every later
// call there returns it.
void FailNthCall(const std::string& api, uint64_t n, cudaError_t error);
void ClearFaults();

// The devices on which a host thread made runtime calls that act on a device
// (cudaSetDevice, allocations, streams, copies, launches, ...), and the
// devices whose primary context was ever initialized (by any thread).
std::set<int> DevicesTouchedBy(std::thread::id thread);
std::set<int> DevicesWithContext();

// Bytes of device memory in use on `device` (its allocations, page-rounded).
uint64_t DeviceBytesInUse(int device);
// Pinned host bytes live (cudaHostAlloc).
uint64_t PinnedBytesInUse();

// A gate in a stream: operations enqueued after it run only once Open() is
// called (or the gate is destroyed). For deterministic ordering tests.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void Open();

 private:
  struct State;
  State* state_;
};

// Holds every engine: no operation starts until ResumeEngines(), so that
// copies stay in flight, deterministically, while a test looks. (No effect
// with Check::kAsync disabled.)
void PauseEngines();
void ResumeEngines();

// Whether every operation enqueued on `stream` so far has run.
bool StreamIdle(cudaStream_t stream);

}  // namespace cudasim

#endif  // PTD_TESTS_CUDASIM_CUDASIM_H_
