// The CUDA runtime calls the project makes, simulated on the CPU (see
// cudasim.h for the model). One lock (Sim::mu) guards all state; engine
// threads run operations outside it and wake waiters through one condition
// variable. Only what runtime/cuda and the tests call is here: a call that
// is missing is a link error, never a silent success.
#include "tests/cudasim/cudasim.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tests/cudasim/kernel_exec.h"
#include "tests/cudasim/launch.h"

// The opaque handle types of the CUDA headers, defined here.
struct CUstream_st;
struct CUevent_st;

namespace cudasim {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kDeviceAlign = 256;                // cudaMalloc's guarantee.
constexpr uint64_t kPoisonBytes = uint64_t{1} << 36;  // Where stray kernel pointers land.

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

[[noreturn]] void Fatal(const std::string& message) {
  std::fprintf(stderr, "cudasim: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// "80G", "64M", "4096": bytes with an optional binary K/M/G/T suffix.
uint64_t ParseBytes(const char* name, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || errno != 0) Fatal(std::string(name) + "=" + text + ": not a byte count");
  uint64_t shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    case 't':
    case 'T':
      shift = 40;
      ++end;
      break;
    default:
      Fatal(std::string(name) + "=" + text + ": unknown suffix (K, M, G or T)");
  }
  if (*end != '\0' || (shift != 0 && v > (~uint64_t{0} >> shift))) {
    Fatal(std::string(name) + "=" + text + ": not a byte count");
  }
  return uint64_t{v} << shift;
}

const char* kCheckNames[] = {"protect",      "async",         "wait_event",  "legacy_sync",
                             "free_sync",    "launch_config", "ordinal",     "capacity",
                             "sticky",       "barrier",       "kernel_host", "pageable_d2h",
                             "pending_free", "pin",           "context",     "misaligned"};
constexpr int kNumChecks = sizeof(kCheckNames) / sizeof(kCheckNames[0]);
std::atomic<bool> g_disabled[kNumChecks];

bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

// Completion of one enqueued operation (an event's record included).
struct Marker {
  bool done = false;  // Guarded by Sim::mu.
};
using MarkerPtr = std::shared_ptr<Marker>;

struct GateFlag {
  bool open = false;  // Guarded by Sim::mu.
};

struct Device;

// Bytes [first, first + size) of device or pinned memory, as the caller
// addresses them.
struct Range {
  uintptr_t first = 0;
  uint64_t size = 0;
};

struct Op {
  std::vector<MarkerPtr> deps;     // Run only once these are done.
  std::shared_ptr<GateFlag> gate;  // Run only once it is open.
  std::function<void()> run;       // Runs without the lock.
  MarkerPtr marker;
  // The device and pinned memory a copy reads or writes: without free_sync,
  // freeing any of it while the op is pending is an error.
  std::vector<Range> touches;
};

}  // namespace
}  // namespace cudasim

struct CUstream_st {
  cudasim::Device* device = nullptr;
  bool legacy = false;
  bool non_blocking = false;
  bool destroyed = false;         // The handle is gone; drains, then frees itself.
  std::deque<cudasim::Op> queue;  // Front: running or next.
  cudasim::MarkerPtr tail;        // The last enqueued op's marker.
  std::mt19937_64 rng;
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  cudasim::MarkerPtr latest;  // The most recent record, or null.
};

namespace cudasim {
namespace {

struct Allocation {
  uint64_t pages_offset = 0;  // From the device's base.
  uint64_t pages_bytes = 0;   // Mapped bytes (the guard page after them is not).
  uint64_t size = 0;          // As asked.
};

struct Device {
  int index = 0;
  uint64_t capacity = 0;
  uint64_t span = 0;                            // Reserved address space.
  uint8_t* host_base = nullptr;                 // Device pointers: PROT_NONE to the host.
  uint8_t* engine_base = nullptr;               // The same offsets, as the engines reach them.
  std::map<uintptr_t, Allocation> allocations;  // By the pointer handed out.
  std::map<uint64_t, uint64_t> free_ranges;     // Offset -> bytes.
  uint64_t used = 0;                            // Charged against the capacity.
  uint64_t reserve = 0;                         // The context's (Config::context_reserve).
  CUstream_st* legacy = nullptr;
  std::vector<CUstream_st*> streams;  // Every stream not yet drained, the legacy one too.
  bool context = false;
  cudaError_t sticky = cudaSuccess;
};

struct Fault {
  uint64_t remaining = 0;
  cudaError_t error = cudaSuccess;
};

struct Sim {
  std::mutex mu;
  std::condition_variable cv;  // Any op done, gate opened, stream drained.
  Config config;
  std::vector<std::unique_ptr<Device>> devices;
  std::map<uintptr_t, uint64_t> pinned;  // Start -> bytes.
  uint64_t pinned_bytes = 0;
  std::unordered_set<CUstream_st*> live_streams;
  std::unordered_set<CUevent_st*> live_events;
  std::unordered_map<std::string, uint64_t> calls;
  std::unordered_map<std::string, Fault> faults;
  std::map<std::thread::id, std::set<int>> touched;
  uint8_t* poison = nullptr;
  uint64_t next_stream_id = 0;
  bool paused = false;  // PauseEngines().
};

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

Sim& S();

void* Reserve(uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) Fatal("cannot reserve " + std::to_string(bytes) + " bytes of address space");
  return p;
}

void EngineLoop(CUstream_st* s);

// REQUIRES: mu held.
CUstream_st* NewStream(Device* d, bool legacy, bool non_blocking) {
  Sim& g = S();
  auto* s = new CUstream_st;
  s->device = d;
  s->legacy = legacy;
  s->non_blocking = non_blocking;
  s->rng.seed(g.config.seed * 0x9E3779B97F4A7C15ull + (++g.next_stream_id));
  d->streams.push_back(s);
  std::thread(EngineLoop, s).detach();
  return s;
}

// REQUIRES: lock holds mu, nothing live.
void BuildDevices(std::unique_lock<std::mutex>& lock) {
  Sim& g = S();
  // The old devices' legacy streams drain and exit first.
  for (auto& d : g.devices) d->legacy->destroyed = true;
  g.cv.notify_all();
  for (auto& d : g.devices) {
    g.cv.wait(lock, [&] { return d->streams.empty(); });
    ::munmap(d->host_base, d->span);
    ::munmap(d->engine_base, d->span);
  }
  g.devices.clear();
  for (int i = 0; i < g.config.devices; ++i) {
    auto d = std::make_unique<Device>();
    d->index = i;
    d->capacity = g.config.capacity;
    d->reserve = Enabled(Check::kContextReserve)
                     ? std::min(g.config.context_reserve, g.config.capacity / 8)
                     : 0;
    // Room for a guard page after every allocation.
    d->span = AlignUp(2 * d->capacity + (uint64_t{64} << 20), kPage);
    d->host_base = static_cast<uint8_t*>(Reserve(d->span));
    d->engine_base = static_cast<uint8_t*>(Reserve(d->span));
    d->free_ranges.emplace(0, d->span);
    if (!Enabled(Check::kDeviceMemoryProtection)) {
      ::mprotect(d->host_base, d->span, PROT_READ | PROT_WRITE);
    }
    d->legacy = NewStream(d.get(), /*legacy=*/true, /*non_blocking=*/false);
    g.devices.push_back(std::move(d));
  }
}

Config ConfigFromEnvironment() {
  Config c;
  if (const char* v = std::getenv("PTD_CUDASIM_DEVICES"); v && *v) {
    c.devices = static_cast<int>(ParseBytes("PTD_CUDASIM_DEVICES", v));
    if (c.devices < 0 || c.devices > 16) Fatal("PTD_CUDASIM_DEVICES must be 0 to 16");
  }
  if (const char* v = std::getenv("PTD_CUDASIM_CAPACITY"); v && *v) {
    c.capacity = ParseBytes("PTD_CUDASIM_CAPACITY", v);
    if (c.capacity > (uint64_t{1} << 40)) Fatal("PTD_CUDASIM_CAPACITY is over 1T");
  }
  if (const char* v = std::getenv("PTD_CUDASIM_CONTEXT_RESERVE"); v && *v) {
    c.context_reserve = ParseBytes("PTD_CUDASIM_CONTEXT_RESERVE", v);
  }
  if (const char* v = std::getenv("PTD_CUDASIM_PINNED_LIMIT"); v && *v) {
    c.pinned_limit = ParseBytes("PTD_CUDASIM_PINNED_LIMIT", v);
  }
  if (const char* v = std::getenv("PTD_CUDASIM_SEED"); v && *v) {
    c.seed = ParseBytes("PTD_CUDASIM_SEED", v);
  }
  if (const char* v = std::getenv("PTD_CUDASIM_MAX_DELAY_US"); v && *v) {
    c.max_delay_us = static_cast<uint32_t>(ParseBytes("PTD_CUDASIM_MAX_DELAY_US", v));
  }
  if (const char* v = std::getenv("PTD_CUDASIM_DISABLE"); v && *v) {
    std::string list = v;
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      const std::string name = list.substr(pos, comma - pos);
      bool found = false;
      for (int i = 0; i < kNumChecks; ++i) {
        if (name == kCheckNames[i]) {
          g_disabled[i] = true;
          found = true;
        }
      }
      if (!found) Fatal("PTD_CUDASIM_DISABLE: unknown check '" + name + "'");
      pos = comma + 1;
    }
  }
  return c;
}

Sim& S() {
  // Never destroyed: engine threads may still wait on it at exit.
  static Sim* const sim = [] {
    auto* g = new Sim;
    g->config = ConfigFromEnvironment();
    g->poison = static_cast<uint8_t*>(Reserve(kPoisonBytes));
    return g;
  }();
  return *sim;
}

bool g_built = false;  // Guarded by Sim::mu.

// The devices, built at the first call that needs them. REQUIRES: mu held
// (by a lock that BuildDevices may not need to release: none are live yet).
std::vector<std::unique_ptr<Device>>& Devices() {
  Sim& g = S();
  if (!g_built) {
    g_built = true;
    std::unique_lock<std::mutex> adopted(g.mu, std::adopt_lock);
    BuildDevices(adopted);
    adopted.release();
  }
  return g.devices;
}

cudaError_t SetLast(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// REQUIRES: mu held.
void Touch(Device* d) {
  S().touched[std::this_thread::get_id()].insert(d->index);
  d->context = true;
}

// REQUIRES: mu held. The current device, or null when its ordinal is out of
// range (cudaSetDevice refuses such, so only a 0-device simulator has none).
Device* Current() {
  auto& devices = Devices();
  if (t_device < 0 || t_device >= static_cast<int>(devices.size())) return nullptr;
  return devices[t_device].get();
}

// Counts the call and applies an injected fault. REQUIRES: mu held.
// Returns the error to fail with, or cudaSuccess.
cudaError_t Count(const char* api) {
  Sim& g = S();
  g.calls[api] += 1;
  auto it = g.faults.find(api);
  if (it == g.faults.end()) return cudaSuccess;
  if (--it->second.remaining > 0) return cudaSuccess;
  const cudaError_t e = it->second.error;
  g.faults.erase(it);
  if (IsSticky(e) && Enabled(Check::kSticky)) {
    if (Device* d = Current()) d->sticky = e;
  }
  return e;
}

// The sticky error of `d`, if any. REQUIRES: mu held.
cudaError_t Sticky(const Device* d) {
  return d != nullptr && Enabled(Check::kSticky) ? d->sticky : cudaSuccess;
}

void EngineLoop(CUstream_st* s) {
  Sim& g = S();
  std::unique_lock<std::mutex> lock(g.mu);
  for (;;) {
    g.cv.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty()) break;  // Destroyed and drained.
    Op& op = s->queue.front();
    g.cv.wait(lock, [&] {
      if (g.paused || (op.gate && !op.gate->open)) return false;
      for (const MarkerPtr& m : op.deps) {
        if (!m->done) return false;
      }
      return true;
    });
    // The random delay: none, a yield, or a sleep of up to max_delay_us.
    const uint64_t draw = s->rng();
    const uint32_t max_us = g.config.max_delay_us;
    std::function<void()> run = std::move(op.run);
    lock.unlock();
    if (max_us > 0) {
      switch (draw % 4) {
        case 0:
        case 1:
          break;
        case 2:
          std::this_thread::yield();
          break;
        default:
          std::this_thread::sleep_for(std::chrono::microseconds(1 + (draw >> 8) % max_us));
      }
    }
    if (run) run();
    lock.lock();
    s->queue.front().marker->done = true;
    s->queue.pop_front();
    g.cv.notify_all();
  }
  Device* d = s->device;
  auto& list = d->streams;
  list.erase(std::remove(list.begin(), list.end(), s), list.end());
  delete s;
  g.cv.notify_all();
}

// Enqueues `run` on `s` after `deps` (and the legacy stream's implicit
// ordering), returns its marker. Without Check::kAsync, waits for it.
// REQUIRES: lock holds mu.
MarkerPtr Enqueue(std::unique_lock<std::mutex>& lock, CUstream_st* s, std::function<void()> run,
                  std::vector<MarkerPtr> deps = {}, std::shared_ptr<GateFlag> gate = nullptr,
                  std::vector<Range> touches = {}) {
  Sim& g = S();
  Device* d = s->device;
  if (Enabled(Check::kLegacyStreamSync)) {
    if (s->legacy) {
      for (CUstream_st* other : d->streams) {
        if (other != s && !other->non_blocking && other->tail) deps.push_back(other->tail);
      }
    } else if (!s->non_blocking && d->legacy->tail) {
      deps.push_back(d->legacy->tail);
    }
  }
  Op op;
  op.deps = std::move(deps);
  op.gate = std::move(gate);
  op.run = std::move(run);
  op.touches = std::move(touches);
  op.marker = std::make_shared<Marker>();
  MarkerPtr marker = op.marker;
  s->queue.push_back(std::move(op));
  s->tail = marker;
  g.cv.notify_all();
  if (!Enabled(Check::kAsync)) g.cv.wait(lock, [&] { return marker->done; });
  return marker;
}

void WaitFor(std::unique_lock<std::mutex>& lock, const std::vector<MarkerPtr>& markers) {
  S().cv.wait(lock, [&] {
    for (const MarkerPtr& m : markers) {
      if (m && !m->done) return false;
    }
    return true;
  });
}

// Every stream of `d`, drained. REQUIRES: lock holds mu.
void SyncDevice(std::unique_lock<std::mutex>& lock, Device* d) {
  std::vector<MarkerPtr> tails;
  for (CUstream_st* s : d->streams) tails.push_back(s->tail);
  WaitFor(lock, tails);
}

// The stream a handle names (0: the current device's legacy stream), or
// null. REQUIRES: mu held.
CUstream_st* Resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) {
    Device* d = Current();
    return d != nullptr ? d->legacy : nullptr;
  }
  return S().live_streams.count(stream) ? stream : nullptr;
}

// Where a pointer is. REQUIRES: mu held.
struct Where {
  enum Kind { kDevice, kPinned, kPageable } kind = kPageable;
  Device* device = nullptr;
  const Allocation* allocation = nullptr;  // kDevice, when inside a live one.
  uintptr_t allocation_start = 0;
};

Where Locate(const void* p) {
  Where w;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (auto& d : Devices()) {
    const auto base = reinterpret_cast<uintptr_t>(d->host_base);
    if (a < base || a >= base + d->span) continue;
    w.kind = Where::kDevice;
    w.device = d.get();
    auto it = d->allocations.upper_bound(a);
    if (it != d->allocations.begin()) {
      --it;
      if (a < it->first + std::max<uint64_t>(it->second.size, 1)) {
        w.allocation = &it->second;
        w.allocation_start = it->first;
      }
    }
    return w;
  }
  const Sim& g = S();
  auto it = g.pinned.upper_bound(a);
  if (it != g.pinned.begin()) {
    --it;
    if (a < it->first + it->second) w.kind = Where::kPinned;
  }
  return w;
}

// The engines' address of device bytes at `p`.
uint8_t* EngineAddress(const Where& w, const void* p) {
  return w.device->engine_base + (reinterpret_cast<const uint8_t*>(p) - w.device->host_base);
}

// Whether [p, p + n) lies inside one live allocation (device) or one
// pinned block (pinned). REQUIRES: mu held.
bool InBounds(const Where& w, const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (w.kind == Where::kDevice) {
    return w.allocation != nullptr && a + n <= w.allocation_start + w.allocation->size;
  }
  return true;
}

// The API preamble: counts, injects, checks the sticky error of `d`.
#define CUDASIM_ENTER(api, device)                             \
  if (const cudaError_t injected_ = ::cudasim::Count(api)) {   \
    return ::cudasim::SetLast(injected_);                      \
  }                                                            \
  if (const cudaError_t sticky_ = ::cudasim::Sticky(device)) { \
    return ::cudasim::SetLast(sticky_);                        \
  }

cudaError_t ValidateDeviceOrdinal(int device) {
  const int n = static_cast<int>(Devices().size());
  if (device < 0 || device >= n) {
    if (Enabled(Check::kDeviceOrdinal) || device < 0) return cudaErrorInvalidDevice;
    // Disabled: an out-of-range ordinal is taken as device 0 (as lenient as
    // a runtime that never checked), for the ordinal self-test.
  }
  return cudaSuccess;
}

// The memcpy behind cudaMemcpy and cudaMemcpyAsync. `sync`: cudaMemcpy.
cudaError_t Memcpy(const char* api, void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                   cudaStream_t stream, bool sync) {
  Sim& g = S();
  std::unique_lock<std::mutex> lock(g.mu);
  CUstream_st* s = Resolve(stream);
  CUDASIM_ENTER(api, s != nullptr ? s->device : Current());
  if (s == nullptr)
    return SetLast(stream == nullptr ? cudaErrorNoDevice : cudaErrorInvalidResourceHandle);
  Touch(s->device);
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return SetLast(cudaErrorInvalidValue);
  const Where to = Locate(dst), from = Locate(src);
  const bool to_device = to.kind == Where::kDevice, from_device = from.kind == Where::kDevice;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!to_device || from_device) return SetLast(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (to_device || !from_device) return SetLast(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (!to_device || !from_device) return SetLast(cudaErrorInvalidValue);
      break;
    case cudaMemcpyHostToHost:
      if (to_device || from_device) return SetLast(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDefault:
      break;
    default:
      return SetLast(cudaErrorInvalidMemcpyDirection);
  }
  if ((to_device && !InBounds(to, dst, count)) || (from_device && !InBounds(from, src, count))) {
    return SetLast(cudaErrorInvalidValue);
  }
  uint8_t* out = to_device ? EngineAddress(to, dst) : static_cast<uint8_t*>(dst);
  const uint8_t* in = from_device ? EngineAddress(from, src) : static_cast<const uint8_t*>(src);
  if (!to_device && !from_device) {
    // Host to host: fully synchronous, in stream order.
    WaitFor(lock, {s->tail});
    lock.unlock();
    std::memmove(out, in, count);
    return cudaSuccess;
  }
  if (!from_device && from.kind == Where::kPageable) {
    // From pageable memory, as documented for cudaMemcpy: the stream is
    // synchronized, the source staged before the call returns; the device
    // write follows in stream order.
    WaitFor(lock, {s->tail});
    auto staged = std::make_shared<std::vector<uint8_t>>(in, in + count);
    MarkerPtr m =
        Enqueue(lock, s, [out, staged] { std::memcpy(out, staged->data(), staged->size()); }, {},
                nullptr, {Range{reinterpret_cast<uintptr_t>(dst), count}});
    if (sync) WaitFor(lock, {m});
    return cudaSuccess;
  }
  // The source is read when the copy runs.
  std::vector<Range> touches;
  if (to_device || to.kind == Where::kPinned) {
    touches.push_back(Range{reinterpret_cast<uintptr_t>(dst), count});
  }
  if (from_device || from.kind == Where::kPinned) {
    touches.push_back(Range{reinterpret_cast<uintptr_t>(src), count});
  }
  MarkerPtr m = Enqueue(
      lock, s, [out, in, count] { std::memmove(out, in, count); }, {}, nullptr, std::move(touches));
  const bool to_pageable = !to_device && to.kind == Where::kPageable;
  if (sync || (to_pageable && Enabled(Check::kPageableD2HSync))) WaitFor(lock, {m});
  return cudaSuccess;
}

// The simulated driver entry point cuDevicePrimaryCtxGetState (CUresult is
// an int enum: 0 success, 101 CUDA_ERROR_INVALID_DEVICE).
int PrimaryCtxGetState(int dev, unsigned int* flags, int* active) {
  Sim& g = S();
  std::lock_guard<std::mutex> lock(g.mu);
  g.calls["cuDevicePrimaryCtxGetState"] += 1;
  auto& devices = Devices();
  if (dev < 0 || dev >= static_cast<int>(devices.size())) return 101;
  if (flags != nullptr) *flags = 0;
  if (active != nullptr) *active = devices[dev]->context ? 1 : 0;
  return 0;
}

}  // namespace

// ---- the test-facing API (cudasim.h) ----

Config CurrentConfig() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().config;
}

bool Configure(const Config& config) {
  Sim& g = S();
  std::unique_lock<std::mutex> lock(g.mu);
  auto& devices = Devices();
  for (auto& d : devices) {
    if (!d->allocations.empty()) return false;
  }
  if (!g.pinned.empty() || !g.live_streams.empty() || !g.live_events.empty()) return false;
  // Streams destroyed but still draining finish first.
  for (auto& d : devices) {
    g.cv.wait(lock, [&] { return d->streams.size() == 1; });
  }
  g.config = config;
  BuildDevices(lock);
  return true;
}

const char* CheckName(Check check) { return kCheckNames[static_cast<int>(check)]; }
bool Enabled(Check check) {
  (void)S();  // The environment's PTD_CUDASIM_DISABLE is read with the configuration.
  return !g_disabled[static_cast<int>(check)];
}
void Disable(Check check) {
  (void)S();
  g_disabled[static_cast<int>(check)] = true;
}
void Enable(Check check) {
  (void)S();
  g_disabled[static_cast<int>(check)] = false;
}

uint64_t CallCount(const std::string& api) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().calls.find(api);
  return it == S().calls.end() ? 0 : it->second;
}

void ResetCallCounts() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().calls.clear();
}

void FailNthCall(const std::string& api, uint64_t n, cudaError_t error) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().faults[api] = Fault{std::max<uint64_t>(n, 1), error};
}

void ClearFaults() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().faults.clear();
}

std::set<int> DevicesTouchedBy(std::thread::id thread) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().touched.find(thread);
  return it == S().touched.end() ? std::set<int>{} : it->second;
}

std::set<int> DevicesWithContext() {
  std::lock_guard<std::mutex> lock(S().mu);
  std::set<int> out;
  for (auto& d : Devices()) {
    if (d->context) out.insert(d->index);
  }
  return out;
}

uint64_t DeviceBytesInUse(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto& devices = Devices();
  if (device < 0 || device >= static_cast<int>(devices.size())) return 0;
  return devices[device]->used;
}

uint64_t PinnedBytesInUse() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().pinned_bytes;
}

struct StreamGate::State {
  std::shared_ptr<GateFlag> flag = std::make_shared<GateFlag>();
};

StreamGate::StreamGate(cudaStream_t stream) : state_(new State) {
  Sim& g = S();
  std::unique_lock<std::mutex> lock(g.mu);
  CUstream_st* s = Resolve(stream);
  if (s == nullptr) Fatal("StreamGate on a stream that does not exist");
  // Without Check::kAsync an op runs before its call returns: a closed gate
  // would never open, so there is none.
  if (!Enabled(Check::kAsync)) return;
  Enqueue(lock, s, nullptr, {}, state_->flag);
}

StreamGate::~StreamGate() {
  Open();
  delete state_;
}

void StreamGate::Open() {
  std::lock_guard<std::mutex> lock(S().mu);
  state_->flag->open = true;
  S().cv.notify_all();
}

void PauseEngines() {
  if (!Enabled(Check::kAsync)) return;
  std::lock_guard<std::mutex> lock(S().mu);
  S().paused = true;
}

void ResumeEngines() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().paused = false;
  S().cv.notify_all();
}

bool StreamIdle(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUstream_st* s = Resolve(stream);
  return s == nullptr || s->tail == nullptr || s->tail->done;
}

// ---- what the launch helper needs (launch.h) ----

namespace internal {

cudaError_t EnqueueKernel(const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                          cudaStream_t stream, size_t param_bytes, std::function<void()> body) {
  Sim& g = S();
  std::unique_lock<std::mutex> lock(g.mu);
  Device* d = Current();
  CUDASIM_ENTER("cudaLaunchKernel", d);
  g.calls[std::string("kernel:") + name] += 1;  // Which kernel: CallCount("kernel:NAME").
  if (d == nullptr) return SetLast(cudaErrorNoDevice);
  CUstream_st* s = Resolve(stream);
  // A launch goes to a stream of the current device.
  if (s == nullptr || s->device != d) return SetLast(cudaErrorInvalidResourceHandle);
  Touch(d);
  if (Enabled(Check::kLaunchConfig)) {
    const uint64_t threads = uint64_t{block.x} * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockDimX ||
        block.y > kMaxBlockDimY || block.z > kMaxBlockDimZ || threads > kMaxThreadsPerBlock ||
        grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDimX ||
        grid.y > kMaxGridDimY || grid.z > kMaxGridDimZ) {
      return SetLast(cudaErrorInvalidConfiguration);
    }
    if (dynamic_shared_bytes > kMaxDynamicSharedBytes || param_bytes > kMaxParamBytes) {
      return SetLast(cudaErrorInvalidValue);
    }
  } else if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 ||
             grid.z == 0) {
    return cudaSuccess;  // Nothing to run.
  }
  const uint64_t seed = s->rng();
  Enqueue(lock, s,
          [grid, block, seed, body = std::move(body)] { RunGrid(grid, block, seed, body); });
  return cudaSuccess;
}

void* KernelPointer(cudaStream_t stream, const void* p) {
  if (p == nullptr) return nullptr;
  Sim& g = S();
  std::lock_guard<std::mutex> lock(g.mu);
  CUstream_st* s = Resolve(stream);
  const Where w = Locate(p);
  if (w.kind == Where::kDevice && s != nullptr && w.device == s->device) {
    return EngineAddress(w, p);
  }
  if (w.kind == Where::kPinned) return const_cast<void*>(p);
  if (w.kind == Where::kPageable && !Enabled(Check::kKernelHostAccess)) {
    return const_cast<void*>(p);
  }
  // Pageable host memory, or another device's: an address in the middle of a
  // PROT_NONE region, with the pointer's alignment.
  const uint64_t quarter = kPoisonBytes / 4;
  return g.poison + quarter + (reinterpret_cast<uintptr_t>(p) % quarter);
}

}  // namespace internal
}  // namespace cudasim

// ---- the CUDA runtime API ----

using cudasim::S;  // NOLINT: the definitions below are extern "C".

namespace cudasim {
namespace {

const char* ErrorName(cudaError_t e) {
  switch (e) {
#define CUDASIM_NAME(x) \
  case x:               \
    return #x;
    CUDASIM_NAME(cudaSuccess)
    CUDASIM_NAME(cudaErrorInvalidValue)
    CUDASIM_NAME(cudaErrorMemoryAllocation)
    CUDASIM_NAME(cudaErrorInitializationError)
    CUDASIM_NAME(cudaErrorInvalidConfiguration)
    CUDASIM_NAME(cudaErrorInvalidDevicePointer)
    CUDASIM_NAME(cudaErrorInvalidMemcpyDirection)
    CUDASIM_NAME(cudaErrorInsufficientDriver)
    CUDASIM_NAME(cudaErrorDevicesUnavailable)
    CUDASIM_NAME(cudaErrorNoDevice)
    CUDASIM_NAME(cudaErrorInvalidDevice)
    CUDASIM_NAME(cudaErrorInvalidResourceHandle)
    CUDASIM_NAME(cudaErrorNotReady)
    CUDASIM_NAME(cudaErrorIllegalAddress)
    CUDASIM_NAME(cudaErrorLaunchOutOfResources)
    CUDASIM_NAME(cudaErrorLaunchTimeout)
    CUDASIM_NAME(cudaErrorHardwareStackError)
    CUDASIM_NAME(cudaErrorIllegalInstruction)
    CUDASIM_NAME(cudaErrorMisalignedAddress)
    CUDASIM_NAME(cudaErrorInvalidAddressSpace)
    CUDASIM_NAME(cudaErrorInvalidPc)
    CUDASIM_NAME(cudaErrorAssert)
    CUDASIM_NAME(cudaErrorECCUncorrectable)
    CUDASIM_NAME(cudaErrorLaunchFailure)
    CUDASIM_NAME(cudaErrorNotSupported)
    CUDASIM_NAME(cudaErrorUnknown)
#undef CUDASIM_NAME
    default:
      return "cudaErrorUnknown";
  }
}

// CUDA's own messages for these codes.
const char* ErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorDevicesUnavailable:
      return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchTimeout:
      return "the launch timed out and was terminated";
    case cudaErrorHardwareStackError:
      return "an illegal stack access was encountered";
    case cudaErrorIllegalInstruction:
      return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorInvalidAddressSpace:
      return "operation not supported on global/shared address space";
    case cudaErrorInvalidPc:
      return "invalid program counter";
    case cudaErrorAssert:
      return "device-side assert triggered";
    case cudaErrorECCUncorrectable:
      return "uncorrectable ECC error encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unrecognized error code";
  }
}

}  // namespace
}  // namespace cudasim

using cudasim::Check;
using cudasim::Enabled;
namespace cs = cudasim;

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (const cudaError_t e = cs::Count("cudaGetDeviceCount")) return cs::SetLast(e);
  if (count == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  const int n = static_cast<int>(cs::Devices().size());
  *count = n;
  return n == 0 ? cs::SetLast(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (const cudaError_t e = cs::Count("cudaSetDevice")) return cs::SetLast(e);
  if (const cudaError_t e = cs::ValidateDeviceOrdinal(device)) return cs::SetLast(e);
  auto& devices = cs::Devices();
  if (device >= static_cast<int>(devices.size())) device = 0;  // Check disabled.
  if (devices.empty()) return cs::SetLast(cudaErrorNoDevice);
  cs::t_device = device;
  // Since CUDA 12, cudaSetDevice initializes the device's primary context.
  cs::Touch(devices[device].get());
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (const cudaError_t e = cs::Count("cudaGetDevice")) return cs::SetLast(e);
  if (device == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  if (cs::Devices().empty()) return cs::SetLast(cudaErrorNoDevice);
  *device = cs::t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (const cudaError_t e = cs::Count("cudaGetDeviceProperties")) return cs::SetLast(e);
  if (prop == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  auto& devices = cs::Devices();
  if (device < 0 || device >= static_cast<int>(devices.size())) {
    return cs::SetLast(cudaErrorInvalidDevice);
  }
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "cudasim");
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = devices[device]->capacity;
  prop->sharedMemPerBlock = cs::internal::kMaxDynamicSharedBytes;
  prop->maxThreadsPerBlock = static_cast<int>(cs::internal::kMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = static_cast<int>(cs::internal::kMaxBlockDimX);
  prop->maxThreadsDim[1] = static_cast<int>(cs::internal::kMaxBlockDimY);
  prop->maxThreadsDim[2] = static_cast<int>(cs::internal::kMaxBlockDimZ);
  prop->maxGridSize[0] = static_cast<int>(cs::internal::kMaxGridDimX);
  prop->maxGridSize[1] = static_cast<int>(cs::internal::kMaxGridDimY);
  prop->maxGridSize[2] = static_cast<int>(cs::internal::kMaxGridDimZ);
  prop->warpSize = 32;
  prop->multiProcessorCount = 1;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaMemGetInfo", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  if (free == nullptr || total == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  cs::Touch(d);
  *free = d->used + d->reserve >= d->capacity ? 0 : d->capacity - d->reserve - d->used;
  *total = d->capacity;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaMalloc", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  if (ptr == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  cs::Touch(d);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  if (size > d->span) return cs::SetLast(cudaErrorMemoryAllocation);
  const uint64_t pages = cs::AlignUp(size, cs::kPage);
  if (cudasim::Enabled(Check::kCapacity) &&
      pages > d->capacity - std::min(d->used + d->reserve, d->capacity)) {
    return cs::SetLast(cudaErrorMemoryAllocation);
  }
  // First fit, with a guard page after the block.
  const uint64_t need = pages + cs::kPage;
  auto it = std::find_if(d->free_ranges.begin(), d->free_ranges.end(),
                         [&](const auto& r) { return r.second >= need; });
  if (it == d->free_ranges.end()) return cs::SetLast(cudaErrorMemoryAllocation);
  const uint64_t offset = it->first;
  const uint64_t left = it->second - need;
  d->free_ranges.erase(it);
  if (left > 0) d->free_ranges.emplace(offset + need, left);
  if (::mprotect(d->engine_base + offset, pages, PROT_READ | PROT_WRITE) != 0) {
    cs::Fatal("mprotect of device memory failed");
  }
  // The block ends where the guard page starts (to its 256-byte alignment),
  // so that reading past its end faults.
  const uint64_t start = offset + (pages - cs::AlignUp(size, cs::kDeviceAlign));
  auto* p = d->host_base + start;
  d->allocations.emplace(reinterpret_cast<uintptr_t>(p), cs::Allocation{offset, pages, size});
  d->used += pages;
  *ptr = p;
  return cudaSuccess;
}

namespace cudasim {
namespace {

// Without free_sync (NVIDIA documents no synchronization for cudaFreeHost,
// and a caller must not count on cudaFree's): freeing memory that a pending
// copy still reads or writes ends the process, naming the call and the
// stream, as a use after free. REQUIRES: mu held.
void CheckNoPendingUse(const char* api, uintptr_t first, uint64_t size) {
  if (Enabled(Check::kFreeSync) || !Enabled(Check::kPendingFree)) return;
  for (auto& d : Devices()) {
    for (CUstream_st* stream : d->streams) {
      for (const Op& op : stream->queue) {
        if (op.marker->done) continue;
        for (const Range& r : op.touches) {
          if (r.first < first + size && first < r.first + r.size) {
            char address[32];
            std::snprintf(address, sizeof(address), "%#llx",
                          static_cast<unsigned long long>(first));
            Fatal(std::string(api) + "(" + address + "): a copy pending on a stream of device " +
                  std::to_string(d->index) +
                  " still reads or writes this memory (free_sync is off: wait for the copy first)");
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cudasim

cudaError_t cudaFree(void* ptr) {
  std::unique_lock<std::mutex> lock(S().mu);
  cs::Device* current = cs::Current();
  CUDASIM_ENTER("cudaFree", current);
  if (ptr == nullptr) return cudaSuccess;
  const cs::Where w = cs::Locate(ptr);
  if (w.kind != cs::Where::kDevice || w.allocation == nullptr ||
      w.allocation_start != reinterpret_cast<uintptr_t>(ptr)) {
    return cs::SetLast(cudaErrorInvalidValue);
  }
  cs::Device* d = w.device;
  cs::Touch(d);
  // cudaFree synchronizes the device.
  if (Enabled(Check::kFreeSync)) cs::SyncDevice(lock, d);
  auto it = d->allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == d->allocations.end()) return cs::SetLast(cudaErrorInvalidValue);  // Freed meanwhile.
  cs::CheckNoPendingUse("cudaFree", reinterpret_cast<uintptr_t>(ptr),
                        std::max<uint64_t>(it->second.size, 1));
  const cs::Allocation a = it->second;
  d->allocations.erase(it);
  ::madvise(d->engine_base + a.pages_offset, a.pages_bytes, MADV_DONTNEED);
  ::mprotect(d->engine_base + a.pages_offset, a.pages_bytes, PROT_NONE);
  d->used -= a.pages_bytes;
  // Back to the free ranges, merged with its neighbours.
  uint64_t offset = a.pages_offset, bytes = a.pages_bytes + cs::kPage;
  auto next = d->free_ranges.lower_bound(offset);
  if (next != d->free_ranges.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = d->free_ranges.erase(next);
  }
  if (next != d->free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      d->free_ranges.erase(prev);
    }
  }
  d->free_ranges.emplace(offset, bytes);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaHostAlloc", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  if (ptr == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  constexpr unsigned kKnown =
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if ((flags & ~kKnown) != 0) return cs::SetLast(cudaErrorInvalidValue);
  cs::Touch(d);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  // The driver pins every page before it returns (the time shows in the
  // caller's timings), and refuses past what the host lets it pin.
  const bool pin = Enabled(Check::kPin);
  if (pin) {
    uint64_t limit = S().config.pinned_limit;
    if (limit == 0) {
      limit = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
              static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    }
    if (S().pinned_bytes + cs::AlignUp(size, cs::kPage) > limit) {
      return cs::SetLast(cudaErrorMemoryAllocation);
    }
  }
  void* p = ::mmap(nullptr, cs::AlignUp(size, cs::kPage), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (pin ? MAP_POPULATE : 0), -1, 0);
  if (p == MAP_FAILED) return cs::SetLast(cudaErrorMemoryAllocation);
  S().pinned.emplace(reinterpret_cast<uintptr_t>(p), cs::AlignUp(size, cs::kPage));
  S().pinned_bytes += cs::AlignUp(size, cs::kPage);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::unique_lock<std::mutex> lock(S().mu);
  cs::Device* current = cs::Current();
  CUDASIM_ENTER("cudaFreeHost", current);
  if (ptr == nullptr) return cudaSuccess;
  auto it = S().pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == S().pinned.end()) return cs::SetLast(cudaErrorInvalidValue);
  if (current != nullptr) cs::Touch(current);
  // cudaFreeHost synchronizes: every device, as the block may be in use by
  // copies on any of them.
  if (Enabled(Check::kFreeSync)) {
    for (auto& d : cs::Devices()) cs::SyncDevice(lock, d.get());
  }
  cs::CheckNoPendingUse("cudaFreeHost", reinterpret_cast<uintptr_t>(ptr), it->second);
  it = S().pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == S().pinned.end()) return cs::SetLast(cudaErrorInvalidValue);  // Freed meanwhile.
  const uint64_t bytes = it->second;
  S().pinned.erase(it);
  S().pinned_bytes -= bytes;
  ::munmap(ptr, bytes);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaHostGetDevicePointer", d);
  if (device_ptr == nullptr || flags != 0) return cs::SetLast(cudaErrorInvalidValue);
  if (cs::Locate(host_ptr).kind != cs::Where::kPinned) return cs::SetLast(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // Unified addressing: the same address.
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUDASIM_ENTER("cudaPointerGetAttributes", cs::Current());
  if (attributes == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  const cs::Where w = cs::Locate(ptr);
  switch (w.kind) {
    case cs::Where::kDevice:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = w.device->index;
      attributes->devicePointer = const_cast<void*>(ptr);
      break;
    case cs::Where::kPinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->device = cs::t_device;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = const_cast<void*>(ptr);
      break;
    case cs::Where::kPageable:
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaStreamCreateWithFlags", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return cs::SetLast(cudaErrorInvalidValue);
  }
  cs::Touch(d);
  CUstream_st* s = cs::NewStream(d, false, (flags & cudaStreamNonBlocking) != 0);
  S().live_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUDASIM_ENTER("cudaStreamDestroy", cs::Current());
  if (stream == nullptr || !S().live_streams.count(stream)) {
    return cs::SetLast(cudaErrorInvalidResourceHandle);
  }
  cs::Touch(stream->device);
  // Returns at once; the stream's work still runs, then it is released.
  S().live_streams.erase(stream);
  stream->destroyed = true;
  S().cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(S().mu);
  CUstream_st* s = cs::Resolve(stream);
  CUDASIM_ENTER("cudaStreamSynchronize", s != nullptr ? s->device : cs::Current());
  if (s == nullptr) return cs::SetLast(cudaErrorInvalidResourceHandle);
  cs::Touch(s->device);
  cs::WaitFor(lock, {s->tail});
  if (const cudaError_t e = cs::Sticky(s->device)) return cs::SetLast(e);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUstream_st* s = cs::Resolve(stream);
  CUDASIM_ENTER("cudaStreamQuery", s != nullptr ? s->device : cs::Current());
  if (s == nullptr) return cs::SetLast(cudaErrorInvalidResourceHandle);
  cs::Touch(s->device);
  return s->tail == nullptr || s->tail->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  std::unique_lock<std::mutex> lock(S().mu);
  CUstream_st* s = cs::Resolve(stream);
  CUDASIM_ENTER("cudaStreamWaitEvent", s != nullptr ? s->device : cs::Current());
  if (s == nullptr || !S().live_events.count(event)) {
    return cs::SetLast(cudaErrorInvalidResourceHandle);
  }
  if (flags != 0 && flags != cudaEventWaitDefault) return cs::SetLast(cudaErrorInvalidValue);
  cs::Touch(s->device);
  // Waits for the event's most recent record, as captured now; an event
  // never recorded is complete.
  if (event->latest != nullptr && Enabled(Check::kStreamWaitEvent)) {
    cs::Enqueue(lock, s, nullptr, {event->latest});
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::unique_lock<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaDeviceSynchronize", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  cs::Touch(d);
  cs::SyncDevice(lock, d);
  if (const cudaError_t e = cs::Sticky(d)) return cs::SetLast(e);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return cs::Memcpy("cudaMemcpy", dst, src, count, kind, nullptr, /*sync=*/true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return cs::Memcpy("cudaMemcpyAsync", dst, src, count, kind, stream, /*sync=*/false);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  cs::Device* d = cs::Current();
  CUDASIM_ENTER("cudaEventCreateWithFlags", d);
  if (d == nullptr) return cs::SetLast(cudaErrorNoDevice);
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~kKnown) != 0) return cs::SetLast(cudaErrorInvalidValue);
  cs::Touch(d);
  auto* e = new CUevent_st;
  e->device = d->index;
  e->flags = flags;
  S().live_events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUDASIM_ENTER("cudaEventDestroy", cs::Current());
  if (!S().live_events.count(event)) return cs::SetLast(cudaErrorInvalidResourceHandle);
  // A pending record still completes: its marker is shared.
  S().live_events.erase(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(S().mu);
  CUstream_st* s = cs::Resolve(stream);
  CUDASIM_ENTER("cudaEventRecord", s != nullptr ? s->device : cs::Current());
  if (s == nullptr || !S().live_events.count(event)) {
    return cs::SetLast(cudaErrorInvalidResourceHandle);
  }
  // The event and the stream must be of one device.
  if (event->device != s->device->index) return cs::SetLast(cudaErrorInvalidResourceHandle);
  cs::Touch(s->device);
  event->latest = cs::Enqueue(lock, s, nullptr);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock<std::mutex> lock(S().mu);
  CUDASIM_ENTER("cudaEventSynchronize", cs::Current());
  if (!S().live_events.count(event)) return cs::SetLast(cudaErrorInvalidResourceHandle);
  cs::Device* d = cs::Devices()[event->device].get();
  cs::Touch(d);
  cs::MarkerPtr m = event->latest;
  cs::WaitFor(lock, {m});
  if (const cudaError_t e = cs::Sticky(d)) return cs::SetLast(e);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(S().mu);
  CUDASIM_ENTER("cudaEventQuery", cs::Current());
  if (!S().live_events.count(event)) return cs::SetLast(cudaErrorInvalidResourceHandle);
  return event->latest == nullptr || event->latest->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().calls["cudaGetLastError"] += 1;
  // A sticky error is returned and stays.
  if (const cudaError_t e = cs::Sticky(cs::Current())) return e;
  const cudaError_t e = cs::t_last_error;
  cs::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::mutex> lock(S().mu);
  S().calls["cudaPeekAtLastError"] += 1;
  if (const cudaError_t e = cs::Sticky(cs::Current())) return e;
  return cs::t_last_error;
}

const char* cudaGetErrorName(cudaError_t error) { return cs::ErrorName(error); }
const char* cudaGetErrorString(cudaError_t error) { return cs::ErrorString(error); }

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn,
                                             unsigned int cuda_version, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  (void)cuda_version;
  (void)flags;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    if (const cudaError_t e = cs::Count("cudaGetDriverEntryPointByVersion")) return cs::SetLast(e);
  }
  if (symbol == nullptr || fn == nullptr) return cs::SetLast(cudaErrorInvalidValue);
  *fn = nullptr;
  if (std::strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0) {
    *fn = reinterpret_cast<void*>(&cs::PrimaryCtxGetState);
    if (status != nullptr) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
  }
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return cs::SetLast(cudaErrorSymbolNotFound);
}

// Check::kMisaligned: the simulated kernels are compiled with UBSan's
// alignment check (tests/cudasim/CMakeLists.txt), which ends the process at
// the first misaligned word unless PTD_CUDASIM_DISABLE names "misaligned".
// (UBSAN_OPTIONS in the environment overrides this; a build with UBSan's
// checks unrecoverable, the ASan stage's, always ends it.)
extern "C" const char* __ubsan_default_options() {
  const char* disabled = std::getenv("PTD_CUDASIM_DISABLE");
  if (disabled != nullptr && std::strstr(disabled, "misaligned") != nullptr) {
    return "halt_on_error=0:print_stacktrace=1";
  }
  return "halt_on_error=1:print_stacktrace=1";
}
