#include "ptd/cuda_device.h"

#include <cuda.h>  // Driver API types only: libcuda is reached through the runtime.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

#include "ptd/host_device.h"
#include "ptd/open_device.h"
#include "ptd/view_materialize.h"
#include "runtime/cuda/internal/collapsed_view.h"
#include "runtime/cuda/internal/cuda_status.h"
#include "runtime/cuda/internal/cufile.h"
#include "runtime/cuda/internal/gather_kernels.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"

namespace ptd {

static_assert(sizeof(size_t) == sizeof(uint64_t), "64-bit hosts only");

namespace {

// cuDevicePrimaryCtxGetState, from the driver through the runtime
// (cudaGetDriverEntryPointByVersion), so that ptd::cuda needs no link
// against libcuda; null when the driver does not have it. Resolved once.
using PrimaryCtxGetStateFn = CUresult (*)(CUdevice dev, unsigned int* flags, int* active);

PrimaryCtxGetStateFn PrimaryCtxGetState() {
  static const PrimaryCtxGetStateFn fn = []() -> PrimaryCtxGetStateFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t error = cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &p,
                                                               12000, cudaEnableDefault, &found);
    if (error != cudaSuccess) (void)cudaGetLastError();
    if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
      return nullptr;
    }
    return reinterpret_cast<PrimaryCtxGetStateFn>(p);
  }();
  return fn;
}

// Whether cuda:`device`'s primary context is initialized (so that making it
// current costs nothing). False when that cannot be told. The device
// ordinal is the driver's CUdevice, as PyTorch assumes too.
bool PrimaryContextActive(int device) {
  const PrimaryCtxGetStateFn get_state = PrimaryCtxGetState();
  if (get_state == nullptr) return false;
  unsigned int flags = 0;
  int active = 0;
  return get_state(static_cast<CUdevice>(device), &flags, &active) == CUDA_SUCCESS && active != 0;
}

// Makes `device` current on this thread for a scope and, after, makes the
// caller's device current again when its primary context is active (as
// PyTorch's MaybeExchangeDevice). cudaGetDevice says 0 on a thread that
// never chose a device, and cudaSetDevice(0) would then create cuda:0's
// primary context (hundreds of MB) for work on cuda:1: such a thread is
// left on `device` instead. So is every thread when the driver cannot say
// whether a context is active.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device_) status_ = cudaSetDevice(device_);
  }
  ~DeviceScope() {
    if (previous_ < 0 || previous_ == device_ || status_ != cudaSuccess) return;
    if (!PrimaryContextActive(previous_)) return;
    // A failure must not surface later, from an unrelated launch check.
    if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  absl::Status status() const {
    return status_ == cudaSuccess ? absl::OkStatus()
                                  : internal::CudaStatus(status_, "cudaSetDevice", device_);
  }

 private:
  int device_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// The widest word (8, 4, 2 or 1 bytes) that divides the element size, the
// address of the view's first element and that of the output. Strides are
// whole elements, so every element read and written is then aligned to the
// word too (a misaligned word access is cudaErrorMisalignedAddress on a GPU).
uint32_t WordSize(uint32_t element_size, const void* first, const void* out) {
  const auto address = reinterpret_cast<uintptr_t>(first) | reinterpret_cast<uintptr_t>(out);
  for (uint32_t w : {8u, 4u, 2u}) {
    if (element_size % w == 0 && address % w == 0) return w;
  }
  return 1;
}

// Staging blocks come in size classes (powers of two from 64 KiB), so that
// a freed block serves later requests of other, nearby sizes.
size_t StagingClass(size_t nbytes) {
  constexpr size_t kMin = size_t{64} << 10;
  if (nbytes <= kMin) return kMin;
  if (nbytes > (size_t{1} << 62)) return nbytes;
  size_t c = kMin;
  while (c < nbytes) c <<= 1;
  return c;
}

// The first line of `path` as an unsigned number; nullopt when it cannot be
// read or is not one ("max": no limit).
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return std::nullopt;
  unsigned long long v = 0;  // NOLINT(runtime/int): sscanf's type.
  const bool ok = std::fscanf(f, "%llu", &v) == 1;
  std::fclose(f);
  if (!ok) return std::nullopt;
  return uint64_t{v};
}

// What this process's memory cgroup still lets it have (v2: memory.max less
// memory.current; v1: memory.limit_in_bytes less memory.usage_in_bytes),
// and where that was read; nullopt without a limit. A container's limit
// binds before the machine's MemAvailable does. The cgroup's folder is
// looked for at its path from /proc/self/cgroup, then at the mount's root
// (inside a container, the path names the host's hierarchy).
std::optional<std::pair<uint64_t, std::string>> CgroupRoomBytes() {
  std::FILE* f = std::fopen("/proc/self/cgroup", "re");
  if (f == nullptr) return std::nullopt;
  char line[4096];
  std::string v2, v1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::string l = line;
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    if (l.rfind("0::", 0) == 0) v2 = l.substr(3);
    const size_t memory = l.find(":memory:");
    if (memory != std::string::npos) v1 = l.substr(memory + 8);
  }
  std::fclose(f);
  struct Layout {
    std::string root, path, max, current;
  };
  const Layout layouts[] = {
      {"/sys/fs/cgroup", v2, "memory.max", "memory.current"},
      {"/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes"}};
  for (const Layout& l : layouts) {
    if (l.path.empty() || l.path.find("..") != std::string::npos) continue;
    for (const std::string& dir : {l.root + (l.path == "/" ? std::string() : l.path), l.root}) {
      const std::optional<uint64_t> max = ReadNumber(dir + "/" + l.max);
      if (!max) continue;  // "max" (no limit), or not there.
      const uint64_t current = ReadNumber(dir + "/" + l.current).value_or(0);
      return std::make_pair(*max > current ? *max - current : 0,
                            absl::StrCat(l.max, " less ", l.current, " in ", dir));
    }
  }
  return std::nullopt;
}

// Offsets of `sizes` in one arena, each at the next kDeviceAlignment
// boundary; the arena's end. ResourceExhausted (with the failing buffer's
// index as kAllocateManyIndexPayload) when the total overflows 64 bits.
absl::StatusOr<uint64_t> ArenaOffsets(absl::Span<const size_t> sizes, const char* call, int device,
                                      std::vector<uint64_t>* offsets) {
  offsets->reserve(sizes.size());
  uint64_t end = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto start = internal::AlignUp(end, kDeviceAlignment);
    const auto next = start ? internal::CheckedAdd(*start, uint64_t{sizes[i]}) : std::nullopt;
    if (!next) {
      absl::Status status = absl::ResourceExhaustedError(
          absl::StrCat(call, " on cuda:", device, ": the total of ", sizes.size(),
                       " buffers overflows 64 bits at buffer ", i, " (", sizes[i], " bytes)"));
      status.SetPayload(kAllocateManyIndexPayload, absl::Cord(std::to_string(i)));
      return status;
    }
    offsets->push_back(*start);
    end = *next;
  }
  return end;
}

// The buffers of an arena: `sizes[i]` bytes at `offsets[i]` (ArenaOffsets),
// sharing the arena's block.
std::vector<DeviceBuffer> SliceArena(const DeviceBuffer& arena, absl::Span<const size_t> sizes,
                                     const std::vector<uint64_t>& offsets) {
  std::vector<DeviceBuffer> buffers;
  buffers.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers.push_back(arena.Slice(static_cast<size_t>(offsets[i]), sizes[i]));
  }
  return buffers;
}

}  // namespace

struct CudaDevice::Impl {
  struct PendingCopy {
    cudaEvent_t event = nullptr;
    uint32_t stream = 0;
    int waiters = 0;    // Threads inside cudaEventSynchronize on it.
    bool done = false;  // Known complete; recycle when no one waits.
  };

  int index = 0;
  std::string name;
  uint32_t compute_capability = 0;
  CudaDeviceOptions options;
  std::vector<cudaStream_t> copy_streams;  // Host-to-device copies, round-robin.
  cudaStream_t work_stream = nullptr;      // CopyToHost and Materialize.
  std::atomic<uint64_t> next_stream{0};
  // One event per copy stream, recorded there and waited on by the work
  // stream so that CopyToHost and Materialize see every copy issued before
  // them. The record and the wait are one step under marker_mu.
  std::vector<cudaEvent_t> stream_markers;
  std::mutex marker_mu;

  mutable std::mutex mu;
  DeviceStats stats;                                  // Guarded by mu.
  std::vector<cudaEvent_t> free_events;               // Guarded by mu.
  std::unordered_map<uint64_t, PendingCopy> pending;  // Guarded by mu.
  uint64_t next_ticket = 1;                           // Guarded by mu.
  // A freed staging block and one event per copy stream, recorded when it
  // was freed: copies from it issued before may still be in flight, and the
  // block is handed out again only once every event completed.
  struct CachedStaging {
    void* p = nullptr;
    std::vector<cudaEvent_t> events;
  };
  // Freed staging blocks by size: any block at least as large as a request
  // serves it (the smallest such). Guarded by mu.
  std::multimap<size_t, CachedStaging> staging_cache;
  uint64_t staging_cache_bytes = 0;  // Guarded by mu.
  uint64_t memcpy_calls = 0;         // Guarded by mu.

  ~Impl() {
    DeviceScope scope(index);
    for (cudaStream_t s : copy_streams) (void)cudaStreamSynchronize(s);
    if (work_stream != nullptr) (void)cudaStreamSynchronize(work_stream);
    for (auto& [size, block] : staging_cache) {
      for (cudaEvent_t e : block.events) (void)cudaEventDestroy(e);
      (void)cudaFreeHost(block.p);
    }
    for (auto& [id, copy] : pending) (void)cudaEventDestroy(copy.event);
    for (cudaEvent_t e : free_events) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : stream_markers) (void)cudaEventDestroy(e);
    for (cudaStream_t s : copy_streams) (void)cudaStreamDestroy(s);
    if (work_stream != nullptr) (void)cudaStreamDestroy(work_stream);
    (void)cudaGetLastError();
  }

  // Makes the work stream wait for every copy issued so far on the copy
  // streams (cudaStreamWaitEvent: the host does not block).
  absl::Status OrderAfterCopies() {
    std::lock_guard<std::mutex> lock(marker_mu);
    for (size_t i = 0; i < copy_streams.size(); ++i) {
      PTD_CUDA_RETURN_IF_ERROR(index, cudaEventRecord, stream_markers[i], copy_streams[i]);
      PTD_CUDA_RETURN_IF_ERROR(index, cudaStreamWaitEvent, work_stream, stream_markers[i], 0);
    }
    return absl::OkStatus();
  }

  // An event from the pool, or a new one.
  absl::StatusOr<cudaEvent_t> AcquireEvent() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!free_events.empty()) {
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    PTD_CUDA_RETURN_IF_ERROR(index, cudaEventCreateWithFlags, &e, cudaEventDisableTiming);
    return e;
  }

  // Frees a device block; called by the last DeviceBuffer of the block, on
  // whatever thread drops it. A failure cannot be reported from here.
  void FreeBlock(void* p, size_t nbytes) {
    {
      DeviceScope scope(index);
      if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
    }
    std::lock_guard<std::mutex> lock(mu);
    stats.live_allocations -= 1;
    stats.live_bytes -= nbytes;
  }

  // A copy batch that failed at `call`: drains `stream` (nothing of it
  // stays in flight), clears the error, takes back the batch's event, and
  // returns the failure.
  absl::Status FailCopy(cudaStream_t stream, cudaEvent_t event, cudaError_t error,
                        const char* call) {
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
    {
      std::lock_guard<std::mutex> lock(mu);
      free_events.push_back(event);
    }
    return internal::CudaStatus(error, call, index);
  }

  // Frees a block of AllocateMappedMany. Nothing of ours is pending on it:
  // the file is read into it by the host, and Materialize and CopyToHost
  // finish before they return (NVIDIA documents no synchronization for
  // cudaFreeHost, so none is counted on).
  void FreeMapped(void* p, size_t block_bytes) {
    {
      DeviceScope scope(index);
      if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
    }
    std::lock_guard<std::mutex> lock(mu);
    stats.live_mapped_bytes -= block_bytes;
  }

  // Takes back a staging block of `block_bytes`: into the cache, behind an
  // event on every copy stream (copies from it may still be in flight), or
  // freed beyond the cache's bound or when an event cannot be recorded,
  // after the copies from it are done (NVIDIA documents no synchronization
  // for cudaFreeHost: one that does not wait would free memory a copy still
  // reads). The work stream never reads staging after a call returns
  // (CopyToHost and Materialize synchronize).
  void ReleaseStaging(void* p, size_t block_bytes) {
    bool cache = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.live_staging_bytes -= block_bytes;
      cache = staging_cache_bytes + block_bytes <= options.staging_cache_bytes;
    }
    DeviceScope scope(index);
    CachedStaging block{p, {}};
    if (cache && scope.status().ok()) {
      block.events.reserve(copy_streams.size());
      for (cudaStream_t stream : copy_streams) {
        absl::StatusOr<cudaEvent_t> event = AcquireEvent();
        if (!event.ok()) {
          cache = false;
          break;
        }
        block.events.push_back(*event);
        if (cudaEventRecord(*event, stream) != cudaSuccess) {
          (void)cudaGetLastError();
          cache = false;
          break;
        }
      }
    } else {
      cache = false;
    }
    if (cache) {
      std::lock_guard<std::mutex> lock(mu);
      // Checked again: another block may have taken the room meanwhile.
      if (staging_cache_bytes + block_bytes <= options.staging_cache_bytes) {
        staging_cache.emplace(block_bytes, std::move(block));
        staging_cache_bytes += block_bytes;
        return;
      }
    }
    if (block.events.size() == copy_streams.size()) {
      (void)AwaitStaging(block.events);  // Failed: a sticky error, which later calls report.
    } else {
      // No event on every stream: wait for the streams themselves.
      for (cudaStream_t stream : copy_streams) {
        if (cudaStreamSynchronize(stream) != cudaSuccess) (void)cudaGetLastError();
      }
      std::lock_guard<std::mutex> lock(mu);
      for (cudaEvent_t e : block.events) free_events.push_back(e);
      block.events.clear();
    }
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }

  // Waits for the copies a cached block's events cover, then returns the
  // events to the pool.
  absl::Status AwaitStaging(std::vector<cudaEvent_t>& events) {
    cudaError_t error = cudaSuccess;
    for (cudaEvent_t e : events) {
      const cudaError_t e_error = cudaEventSynchronize(e);
      if (error == cudaSuccess) error = e_error;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      free_events.insert(free_events.end(), events.begin(), events.end());
    }
    events.clear();
    if (error != cudaSuccess) return internal::CudaStatus(error, "cudaEventSynchronize", index);
    return absl::OkStatus();
  }

  // The address a kernel on this device reads `p` through: `p` itself when
  // [p, p + 1) is device memory of this device (cudaMalloc'ed on it), or,
  // with `allow_mapped`, the device pointer of page-locked host memory
  // mapped for the device (AllocateMappedMany). InvalidArgument naming
  // `what` otherwise, pageable host memory included (a kernel that reads it
  // kills the context).
  struct KernelPointer {
    const void* p = nullptr;
    bool mapped = false;  // Host memory mapped for the device.
  };
  absl::StatusOr<KernelPointer> CheckDeviceMemory(const void* p, const char* call, const char* what,
                                                  bool allow_mapped = false) {
    cudaPointerAttributes attributes;
    std::memset(&attributes, 0, sizeof(attributes));
    const cudaError_t error = cudaPointerGetAttributes(&attributes, p);
    if (error != cudaSuccess) {
      // Older CUDA fails on a pointer it does not know (plain host memory).
      (void)cudaGetLastError();
    } else if (attributes.type == cudaMemoryTypeDevice && attributes.device == index) {
      return KernelPointer{p, false};
    } else if (allow_mapped && attributes.type == cudaMemoryTypeHost &&
               attributes.devicePointer != nullptr) {
      return KernelPointer{attributes.devicePointer, true};
    }
    std::string is;
    if (error != cudaSuccess) {
      is =
          absl::StrCat("unknown to CUDA (cudaPointerGetAttributes: ", cudaGetErrorName(error), ")");
    } else {
      switch (attributes.type) {
        case cudaMemoryTypeDevice:
          is = absl::StrCat("device memory of cuda:", attributes.device);
          break;
        case cudaMemoryTypeHost:
          is = allow_mapped ? "pinned host memory not mapped for the device" : "pinned host memory";
          break;
        case cudaMemoryTypeManaged:
          is = "managed memory";
          break;
        default:
          is = "host memory";
          break;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        call, " on cuda:", index, ": ", what, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)),
        " is not device memory of cuda:", index,
        allow_mapped ? " nor host memory mapped for it" : "", " (it is ", is, ")"));
  }

  // The dense copy of `view` over `storage` into `out` (REQUIRES: both
  // checked, this device current, the plan's extent not empty). Returns
  // when done.
  absl::Status Materialize(const MaterializePlan& plan, KernelPointer storage, const ViewSpec& view,
                           void* out) {
    PTD_RETURN_IF_ERROR(OrderAfterCopies());
    cudaStream_t stream = work_stream;
    const void* first = static_cast<const uint8_t*>(storage.p) + plan.extent.first_byte;
    const internal::CollapsedView c = internal::CollapseView(view.sizes, view.strides);
    const uint32_t word = WordSize(view.element_size, first, out);
    const uint32_t words_per_element = view.element_size / word;
    if (c.rank == 0 || (c.rank == 1 && c.strides[0] == 1)) {
      // The view is the bytes [first_byte, first_byte + output_nbytes).
      // From mapped host memory the direction is the runtime's to tell
      // (unified addressing): a host-to-device copy.
      PTD_CUDA_RETURN_IF_ERROR(
          index, cudaMemcpyAsync, out, first, static_cast<size_t>(plan.output_nbytes),
          storage.mapped ? cudaMemcpyDefault : cudaMemcpyDeviceToDevice, stream);
    } else if (c.rank == 2 && c.strides[0] == 1 && words_per_element == 1) {
      // A transposed matrix: rows x cols with strides (1, ld).
      PTD_CUDA_RETURN_IF_ERROR(index, internal::LaunchTranspose, first, out, c.sizes[0], c.sizes[1],
                               c.strides[1], word, stream);
    } else {
      internal::GatherGeometry geometry;
      geometry.rank = c.rank;
      if (words_per_element > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Materialize on cuda:", index, ": elements of ", view.element_size, " bytes are ",
            words_per_element, " words, more than the kernel counts (2^31 - 1)"));
      }
      geometry.words_per_element = static_cast<int32_t>(words_per_element);
      std::copy(c.sizes, c.sizes + c.rank, geometry.sizes);
      std::copy(c.strides, c.strides + c.rank, geometry.strides);
      PTD_CUDA_RETURN_IF_ERROR(index, internal::LaunchGather, first, out, plan.extent.numel, word,
                               geometry, stream);
    }
    PTD_CUDA_RETURN_IF_ERROR(index, cudaStreamSynchronize, stream);
    return absl::OkStatus();
  }

  // Returns a finished copy's event to the pool. REQUIRES: mu held.
  void Recycle(std::unordered_map<uint64_t, PendingCopy>::iterator it) {
    free_events.push_back(it->second.event);
    pending.erase(it);
  }
};

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void RegisterCudaDevice() {
  RegisterDeviceFactory(std::string(DeviceKindName(DeviceKind::kCuda)),
                        [](int index) -> absl::StatusOr<std::shared_ptr<Device>> {
                          PTD_ASSIGN_OR_RETURN(std::shared_ptr<CudaDevice> device,
                                               CudaDevice::Open(index));
                          return std::shared_ptr<Device>(std::move(device));
                        });
}

absl::StatusOr<std::shared_ptr<CudaDevice>> CudaDevice::Open(int index,
                                                             const CudaDeviceOptions& options) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // "Insufficient driver" also means "no driver at all": say which.
    if (error == cudaErrorInsufficientDriver) {
      void* libcuda = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (libcuda != nullptr) ::dlclose(libcuda);
      if (libcuda == nullptr && ::access("/dev/nvidiactl", F_OK) != 0) {
        (void)cudaGetLastError();
        return absl::UnavailableError(
            "no CUDA device: no NVIDIA driver found (libcuda.so.1 cannot be loaded and "
            "/dev/nvidiactl does not exist)");
      }
    }
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device: ", internal::CudaStatus(error, "cudaGetDeviceCount", -1).message()));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: cudaGetDeviceCount found 0");
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", index, " does not exist: ", count, " CUDA device(s) visible"));
  }
  if (options.streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaDeviceOptions::streams is ", options.streams, ": at least 1"));
  }
  auto impl = std::make_unique<Impl>();
  impl->index = index;
  impl->options = options;
  DeviceScope scope(index);
  PTD_RETURN_IF_ERROR(scope.status());
  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof(prop));
  PTD_CUDA_RETURN_IF_ERROR(index, cudaGetDeviceProperties, &prop, index);
  impl->compute_capability = static_cast<uint32_t>(prop.major * 10 + prop.minor);
  prop.name[sizeof(prop.name) - 1] = '\0';
  impl->name =
      absl::StrCat("cuda:", index, " (", prop.name, ", sm_", impl->compute_capability, ")");
  // If a stream fails, ~Impl destroys the ones made so far.
  for (int i = 0; i < options.streams; ++i) {
    cudaStream_t stream = nullptr;
    PTD_CUDA_RETURN_IF_ERROR(index, cudaStreamCreateWithFlags, &stream, cudaStreamNonBlocking);
    impl->copy_streams.push_back(stream);
  }
  PTD_CUDA_RETURN_IF_ERROR(index, cudaStreamCreateWithFlags, &impl->work_stream,
                           cudaStreamNonBlocking);
  for (int i = 0; i < options.streams; ++i) {
    cudaEvent_t marker = nullptr;
    PTD_CUDA_RETURN_IF_ERROR(index, cudaEventCreateWithFlags, &marker, cudaEventDisableTiming);
    impl->stream_markers.push_back(marker);
  }
  return std::shared_ptr<CudaDevice>(new CudaDevice(std::move(impl)));
}

CudaDevice::CudaDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaDevice::~CudaDevice() = default;  // ~Impl synchronizes and frees.

int CudaDevice::index() const { return impl_->index; }
std::string CudaDevice::name() const { return impl_->name; }
std::optional<uint32_t> CudaDevice::compute_capability() const { return impl_->compute_capability; }

absl::StatusOr<DeviceBuffer> CudaDevice::Allocate(size_t nbytes) {
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  // A zero-byte request still gets a block of its own, so the handle is
  // non-null and distinct (cudaMalloc(0) may return nullptr).
  const size_t block_bytes = std::max<size_t>(nbytes, 1);
  void* p = nullptr;
  const cudaError_t error = cudaMalloc(&p, block_bytes);
  if (error != cudaSuccess) {
    absl::Status status = internal::CudaStatus(error, "cudaMalloc", impl_->index);
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", block_bytes, " bytes requested)"));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.allocations += 1;
    impl_->stats.allocated_bytes += block_bytes;
    impl_->stats.live_allocations += 1;
    impl_->stats.live_bytes += block_bytes;
  }
  Impl* impl = impl_.get();
  std::shared_ptr<void> block(p, [impl, block_bytes](void* q) { impl->FreeBlock(q, block_bytes); });
  return DeviceBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<std::vector<DeviceBuffer>> CudaDevice::AllocateMany(absl::Span<const size_t> sizes) {
  if (sizes.empty()) return std::vector<DeviceBuffer>{};
  // One arena: each buffer starts at the next kDeviceAlignment boundary.
  std::vector<uint64_t> offsets;
  PTD_ASSIGN_OR_RETURN(const uint64_t end,
                       ArenaOffsets(sizes, "AllocateMany", impl_->index, &offsets));
  auto got = Allocate(static_cast<size_t>(end));
  if (!got.ok()) {
    // Name the first buffer that does not fit in the free memory (the last
    // one when all would fit, as with fragmentation).
    size_t failed = sizes.size() - 1;
    std::string free_note;
    size_t free_bytes = 0, total_bytes = 0;
    {
      DeviceScope scope(impl_->index);
      if (scope.status().ok() && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (offsets[i] + sizes[i] > free_bytes) {
            failed = i;
            break;
          }
        }
        free_note = absl::StrCat("; ", free_bytes, " of ", total_bytes, " bytes free");
      } else {
        (void)cudaGetLastError();
      }
    }
    absl::Status status(
        got.status().code(),
        absl::StrCat("buffer ", failed, " of ", sizes.size(), " (", sizes[failed],
                     " bytes, ending at byte ", offsets[failed] + sizes[failed], " of a ", end,
                     "-byte arena): ", got.status().message(), free_note));
    status.SetPayload(kAllocateManyIndexPayload, absl::Cord(std::to_string(failed)));
    return status;
  }
  return SliceArena(*got, sizes, offsets);
}

absl::StatusOr<std::vector<DeviceBuffer>> CudaDevice::AllocateMappedMany(
    absl::Span<const size_t> sizes) {
  if (sizes.empty()) return std::vector<DeviceBuffer>{};
  std::vector<uint64_t> offsets;
  PTD_ASSIGN_OR_RETURN(const uint64_t end,
                       ArenaOffsets(sizes, "AllocateMappedMany", impl_->index, &offsets));
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  const size_t block_bytes = std::max<size_t>(static_cast<size_t>(end), 1);
  void* p = nullptr;
  cudaError_t error = cudaHostAlloc(&p, block_bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (error != cudaSuccess) {
    absl::Status status = internal::CudaStatus(error, "cudaHostAlloc", impl_->index);
    return absl::Status(status.code(), absl::StrCat(status.message(), " (", block_bytes,
                                                    " bytes of mapped pinned host memory for ",
                                                    sizes.size(), " buffers)"));
  }
  void* device_p = nullptr;
  error = cudaHostGetDevicePointer(&device_p, p, 0);
  if (error != cudaSuccess || device_p != p) {
    if (error != cudaSuccess) (void)cudaGetLastError();
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
    if (error != cudaSuccess)
      return internal::CudaStatus(error, "cudaHostGetDevicePointer", impl_->index);
    // One pointer serves the host and the kernels only under unified
    // addressing (every 64-bit platform CUDA 12 supports).
    return absl::UnimplementedError(
        absl::StrCat("cudaHostGetDevicePointer on cuda:", impl_->index,
                     ": mapped host memory at 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)),
                     " has device address 0x", absl::Hex(reinterpret_cast<uintptr_t>(device_p)),
                     " (no unified addressing; mapped weights need it)"));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.mapped_allocations += 1;
    impl_->stats.live_mapped_bytes += block_bytes;
  }
  Impl* impl = impl_.get();
  DeviceBuffer arena(
      std::shared_ptr<void>(p, [impl, block_bytes](void* q) { impl->FreeMapped(q, block_bytes); }),
      p, static_cast<size_t>(end));
  return SliceArena(arena, sizes, offsets);
}

absl::StatusOr<std::unique_ptr<DeviceFileReader>> CudaDevice::OpenFileReader(
    int fd, const std::string& name) {
  return internal::OpenCuFileReader(impl_->index, fd, name);
}

absl::StatusOr<DeviceMemoryInfo> CudaDevice::MemoryInfo() {
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  size_t free_bytes = 0, total_bytes = 0;
  PTD_CUDA_RETURN_IF_ERROR(impl_->index, cudaMemGetInfo, &free_bytes, &total_bytes);
  DeviceMemoryInfo info{.free_bytes = free_bytes, .total_bytes = total_bytes};
  // The smaller of the machine's MemAvailable and the cgroup's room, less a
  // reserve (1/16 of it, at least 256 MiB) for everything else on the host.
  std::optional<uint64_t> bound = MemAvailableBytes();
  std::string source = "MemAvailable in /proc/meminfo";
  if (const auto cgroup = CgroupRoomBytes(); cgroup && (!bound || cgroup->first < *bound)) {
    bound = cgroup->first;
    source = cgroup->second;
  }
  if (bound) {
    const uint64_t reserve = std::min(*bound, std::max(*bound / 16, uint64_t{256} << 20));
    info.mappable_bytes = *bound - reserve;
    info.mappable_source = absl::StrCat(source, ", less a reserve of ", reserve, " bytes");
  }
  return info;
}

absl::StatusOr<HostBuffer> CudaDevice::AllocateStaging(size_t nbytes) {
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  void* p = nullptr;
  size_t block_bytes = 0;
  std::vector<cudaEvent_t> events;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->staging_cache.lower_bound(nbytes);  // The smallest large enough.
    if (it != impl_->staging_cache.end()) {
      block_bytes = it->first;
      p = it->second.p;
      events = std::move(it->second.events);
      impl_->staging_cache.erase(it);
      impl_->staging_cache_bytes -= block_bytes;
    }
  }
  if (p != nullptr) {
    // Copies from the block, issued before it was freed, may still run:
    // the caller would overwrite their source.
    absl::Status waited = impl_->AwaitStaging(events);
    if (!waited.ok()) {
      if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
      return absl::Status(waited.code(),
                          absl::StrCat(waited.message(), " (copies from a cached staging block)"));
    }
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.live_staging_bytes += block_bytes;
  } else {
    block_bytes = StagingClass(nbytes);
    const cudaError_t error = cudaHostAlloc(&p, block_bytes, cudaHostAllocDefault);
    if (error != cudaSuccess) {
      absl::Status status = internal::CudaStatus(error, "cudaHostAlloc", impl_->index);
      return absl::Status(status.code(),
                          absl::StrCat(status.message(), " (", nbytes, " bytes of pinned staging, ",
                                       block_bytes, " with its size class)"));
    }
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.staging_allocations += 1;
    impl_->stats.live_staging_bytes += block_bytes;
  }
  Impl* impl = impl_.get();
  std::shared_ptr<void> block(
      p, [impl, block_bytes](void* q) { impl->ReleaseStaging(q, block_bytes); });
  return HostBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<CopyTicket> CudaDevice::CopyToDeviceAsync(void* dst, const void* src,
                                                         size_t nbytes) {
  const CopyRequest request{.dst = dst, .src = src, .nbytes = nbytes};
  PTD_ASSIGN_OR_RETURN(std::vector<CopyTicket> tickets,
                       CopyManyToDeviceAsync(absl::MakeConstSpan(&request, 1)));
  return tickets.front();
}

absl::StatusOr<std::vector<CopyTicket>> CudaDevice::CopyManyToDeviceAsync(
    absl::Span<const CopyRequest> requests) {
  std::vector<CopyTicket> tickets;
  if (requests.empty()) return tickets;
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  // The event first: once a copy is issued, nothing can keep it from its
  // ticket (a failure after it drains the stream before returning).
  PTD_ASSIGN_OR_RETURN(cudaEvent_t event, impl_->AcquireEvent());
  const auto stream_index = static_cast<uint32_t>(
      impl_->next_stream.fetch_add(1, std::memory_order_relaxed) % impl_->copy_streams.size());
  cudaStream_t stream = impl_->copy_streams[stream_index];
  const auto fail = [&](cudaError_t error, const char* call) {
    return impl_->FailCopy(stream, event, error, call);
  };
  // Requests that follow each other in both source and destination (the
  // pieces of a packed read into one arena) go as one cudaMemcpyAsync: a
  // copy costs microseconds, whatever its size.
  uint64_t bytes = 0, calls = 0;
  const uint8_t* run_src = nullptr;
  uint8_t* run_dst = nullptr;
  size_t run_bytes = 0;
  const auto issue_run = [&]() -> cudaError_t {
    if (run_bytes == 0) return cudaSuccess;
    ++calls;
    // The direction from the addresses (unified addressing), whatever
    // memory the caller names.
    return cudaMemcpyAsync(run_dst, run_src, run_bytes, cudaMemcpyDefault, stream);
  };
  for (const CopyRequest& r : requests) {
    if (r.nbytes == 0) continue;
    const auto* src = static_cast<const uint8_t*>(r.src);
    auto* dst = static_cast<uint8_t*>(r.dst);
    bytes += r.nbytes;
    if (run_bytes != 0 && src == run_src + run_bytes && dst == run_dst + run_bytes &&
        r.nbytes <= std::numeric_limits<size_t>::max() - run_bytes) {
      run_bytes += r.nbytes;
      continue;
    }
    const cudaError_t error = issue_run();
    if (error != cudaSuccess) return fail(error, "cudaMemcpyAsync");
    run_src = src;
    run_dst = dst;
    run_bytes = r.nbytes;
  }
  if (const cudaError_t error = issue_run(); error != cudaSuccess) {
    return fail(error, "cudaMemcpyAsync");
  }
  // One event after the batch's last copy: one ticket, one wait.
  const cudaError_t error = cudaEventRecord(event, stream);
  if (error != cudaSuccess) return fail(error, "cudaEventRecord");
  std::lock_guard<std::mutex> lock(impl_->mu);
  const uint64_t id = impl_->next_ticket++;
  impl_->pending.emplace(id, Impl::PendingCopy{event, stream_index, 0, false});
  impl_->stats.copies += requests.size();  // Requests, as Device's default counts them.
  impl_->stats.copied_bytes += bytes;
  impl_->memcpy_calls += calls;
  tickets.push_back(
      CopyTicket{.id = id, .stream = stream_index, .runtime_calls = static_cast<uint32_t>(calls)});
  return tickets;
}

static_assert(sizeof(ScatterPiece) == sizeof(internal::ScatterEntry) &&
                  offsetof(ScatterPiece, dst_offset) ==
                      offsetof(internal::ScatterEntry, dst_offset) &&
                  offsetof(ScatterPiece, nbytes) == offsetof(internal::ScatterEntry, nbytes),
              "the scatter kernel reads the table as ScatterPiece lays it out");

absl::StatusOr<std::vector<CopyTicket>> CudaDevice::ScatterToDeviceAsync(
    void* scratch, const void* src, size_t nbytes, size_t table_offset, size_t count,
    void* dst_base) {
  std::vector<CopyTicket> tickets;
  if (nbytes == 0) return tickets;
  if (table_offset % alignof(ScatterPiece) != 0 ||
      table_offset + count * sizeof(ScatterPiece) > nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScatterToDeviceAsync on cuda:", impl_->index, ": a table of ", count, " pieces at offset ",
        table_offset, " does not fit an aligned ", nbytes, "-byte block"));
  }
  PTD_RETURN_IF_ERROR(
      impl_->CheckDeviceMemory(scratch, "ScatterToDeviceAsync", "the scratch").status());
  PTD_RETURN_IF_ERROR(
      impl_->CheckDeviceMemory(dst_base, "ScatterToDeviceAsync", "the destination").status());
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  PTD_ASSIGN_OR_RETURN(cudaEvent_t event, impl_->AcquireEvent());
  const auto stream_index = static_cast<uint32_t>(
      impl_->next_stream.fetch_add(1, std::memory_order_relaxed) % impl_->copy_streams.size());
  cudaStream_t stream = impl_->copy_streams[stream_index];
  const auto fail = [&](cudaError_t error, const char* call) {
    return impl_->FailCopy(stream, event, error, call);
  };
  // One copy of the block (the bytes and the table), then the kernel that
  // moves each piece, in stream order, then the event.
  cudaError_t error = cudaMemcpyAsync(scratch, src, nbytes, cudaMemcpyDefault, stream);
  if (error != cudaSuccess) return fail(error, "cudaMemcpyAsync");
  auto* block = static_cast<uint8_t*>(scratch);
  error = internal::LaunchScatter(
      block, reinterpret_cast<const internal::ScatterEntry*>(block + table_offset), count, dst_base,
      stream);
  if (error != cudaSuccess) return fail(error, "ptd_scatter");
  error = cudaEventRecord(event, stream);
  if (error != cudaSuccess) return fail(error, "cudaEventRecord");
  std::lock_guard<std::mutex> lock(impl_->mu);
  const uint64_t id = impl_->next_ticket++;
  impl_->pending.emplace(id, Impl::PendingCopy{event, stream_index, 0, false});
  impl_->stats.copies += count;
  impl_->stats.copied_bytes += table_offset;
  impl_->memcpy_calls += 1;
  tickets.push_back(CopyTicket{.id = id, .stream = stream_index, .runtime_calls = 1});
  return tickets;
}

absl::Status CudaDevice::Wait(const CopyTicket& ticket) {
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (ticket.id == 0 || ticket.id >= impl_->next_ticket) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Wait on cuda:", impl_->index, ": copy ticket ", ticket.id, " was not issued here"));
    }
    auto it = impl_->pending.find(ticket.id);
    // Issued here and gone from `pending`: already waited or synchronized.
    if (it == impl_->pending.end()) return absl::OkStatus();
    if (it->second.stream != ticket.stream) {
      return absl::InvalidArgumentError(
          absl::StrCat("Wait on cuda:", impl_->index, ": copy ticket ", ticket.id, " names stream ",
                       ticket.stream, " but was issued on stream ", it->second.stream));
    }
    if (it->second.done) return absl::OkStatus();
    event = it->second.event;
    it->second.waiters += 1;
  }
  const cudaError_t error = cudaEventSynchronize(event);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->pending.find(ticket.id);
    it->second.waiters -= 1;
    it->second.done = true;
    if (it->second.waiters == 0) impl_->Recycle(it);
  }
  if (error != cudaSuccess) {
    return internal::CudaStatus(error, "cudaEventSynchronize", impl_->index);
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize() {
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  std::vector<uint64_t> issued;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    issued.reserve(impl_->pending.size());
    for (const auto& [id, copy] : impl_->pending) issued.push_back(id);
  }
  for (cudaStream_t stream : impl_->copy_streams) {
    PTD_CUDA_RETURN_IF_ERROR(impl_->index, cudaStreamSynchronize, stream);
  }
  PTD_CUDA_RETURN_IF_ERROR(impl_->index, cudaStreamSynchronize, impl_->work_stream);
  // Every copy issued before the streams drained is done.
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (uint64_t id : issued) {
    auto it = impl_->pending.find(id);
    if (it == impl_->pending.end()) continue;
    it->second.done = true;
    if (it->second.waiters == 0) impl_->Recycle(it);
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHost(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return absl::OkStatus();  // CUDA is never handed a null pointer.
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  PTD_RETURN_IF_ERROR(impl_->OrderAfterCopies());
  // cudaMemcpyDefault: `src` may be a storage in mapped host memory (a
  // budgeted load), which a device-to-host copy may not name (the runtime
  // tells the direction from the addresses under unified addressing).
  PTD_CUDA_RETURN_IF_ERROR(impl_->index, cudaMemcpyAsync, dst, src, nbytes, cudaMemcpyDefault,
                           impl_->work_stream);
  PTD_CUDA_RETURN_IF_ERROR(impl_->index, cudaStreamSynchronize, impl_->work_stream);
  return absl::OkStatus();
}

DeviceStats CudaDevice::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

uint64_t CudaDevice::staging_cache_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->staging_cache_bytes;
}

void CudaDevice::TrimStagingCache() {
  std::multimap<size_t, Impl::CachedStaging> cache;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    cache.swap(impl_->staging_cache);
    impl_->staging_cache_bytes = 0;
  }
  DeviceScope scope(impl_->index);
  for (auto& [size, block] : cache) {
    // The copies from the block first (cudaFreeHost need not wait for them);
    // the events go back to the pool.
    (void)impl_->AwaitStaging(block.events);
    if (cudaFreeHost(block.p) != cudaSuccess) (void)cudaGetLastError();
  }
}

uint64_t CudaDevice::memcpy_calls() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->memcpy_calls;
}

absl::StatusOr<DeviceBuffer> CudaDevice::Materialize(const DeviceBuffer& storage,
                                                     const ViewSpec& view) {
  PTD_ASSIGN_OR_RETURN(const MaterializePlan plan, PlanMaterialize(view, storage.size()));
  if (plan.extent.empty()) return Allocate(static_cast<size_t>(plan.output_nbytes));
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  // Before allocating: a refused storage allocates nothing.
  PTD_ASSIGN_OR_RETURN(const Impl::KernelPointer source,
                       impl_->CheckDeviceMemory(storage.data(), "Materialize", "the storage",
                                                /*allow_mapped=*/true));
  PTD_ASSIGN_OR_RETURN(DeviceBuffer out, Allocate(static_cast<size_t>(plan.output_nbytes)));
  PTD_RETURN_IF_ERROR(impl_->Materialize(plan, source, view, out.data()));
  return out;
}

absl::Status CudaDevice::MaterializeInto(const DeviceBuffer& storage, const ViewSpec& view,
                                         const DeviceBuffer& out) {
  PTD_ASSIGN_OR_RETURN(const MaterializePlan plan, PlanMaterialize(view, storage.size()));
  if (out.size() < plan.output_nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("MaterializeInto on cuda:", impl_->index,
                                                   ": the output buffer holds ", out.size(),
                                                   " bytes, the view needs ", plan.output_nbytes));
  }
  if (plan.extent.empty()) return absl::OkStatus();  // Nothing is read or written.
  DeviceScope scope(impl_->index);
  PTD_RETURN_IF_ERROR(scope.status());
  PTD_ASSIGN_OR_RETURN(const Impl::KernelPointer source,
                       impl_->CheckDeviceMemory(storage.data(), "MaterializeInto", "the storage",
                                                /*allow_mapped=*/true));
  PTD_RETURN_IF_ERROR(
      impl_->CheckDeviceMemory(out.data(), "MaterializeInto", "the output buffer").status());
  return impl_->Materialize(plan, source, view, out.data());
}

}  // namespace ptd
