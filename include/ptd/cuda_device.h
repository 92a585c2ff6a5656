// CudaDevice: a ptd::Device on one CUDA GPU (cuda:N). Target ptd::cuda,
// built when the CUDA toolkit is found (PTD_WITH_CUDA). This header does not
// include CUDA headers: streams and events live behind a pimpl.
//
// Opening one: CudaDevice::Open(N) is the way. OpenDevice("cuda:N")
// (ptd/open_device.h) is only for a device named at run time (a --device
// flag, a Python string); it reaches this same Open through the factory that
// RegisterCudaDevice() installs.
//
// Example:
//   absl::StatusOr<std::shared_ptr<ptd::CudaDevice>> gpu = ptd::CudaDevice::Open(0);
//   if (!gpu.ok()) ...  // Unavailable "no CUDA device: ..." on a machine without one.
//   auto weights = ptd::LoadWeights(paths, *gpu);
//
// What it does beyond the Device contract (ptd/device.h):
// - AllocateMany makes one cudaMalloc (an arena) and hands out 256-byte
//   aligned slices of it; the arena is freed when its last slice goes.
//   Allocate makes one cudaMalloc per call.
// - AllocateStaging returns page-locked host memory (cudaHostAlloc) in size
//   classes (powers of two from 64 KiB). A freed staging block goes to a
//   cache, and a later request of any size up to the block's reuses it (the
//   smallest block large enough), so repeated loads, of one model or of
//   others, make no new pinned allocations. The cache is bounded
//   (CudaDeviceOptions::staging_cache_bytes) and freed with the device.
//   A block may be dropped while copies from it are still in flight: it
//   goes to the cache behind an event recorded on every copy stream, and is
//   handed out again only after those events completed (AllocateStaging may
//   then block for the copies).
// - CopyManyToDeviceAsync issues a batch of cudaMemcpyAsync (one staging
//   slot's pieces) on one of `streams` non-blocking streams, round-robin by
//   batch, and records one pooled event after the batch's last copy: one
//   ticket, one wait per slot. Requests that follow each other in both
//   source and destination (the pieces of a packed read into one arena) are
//   merged into one cudaMemcpyAsync; stats().copies still counts requests
//   (as Device's default does), memcpy_calls() the cudaMemcpyAsync calls.
//   CopyToDeviceAsync is a batch of one. The
//   event is taken before the first copy is issued, so no copy is ever in
//   flight without a ticket. Wait() synchronizes on the event and recycles
//   it. Waiting again on a ticket already waited (or covered by
//   Synchronize) returns OK; a ticket this device never issued is
//   InvalidArgument.
// - CopyToHost and Materialize(Into) run on the device's own stream, which first
//   waits (cudaStreamWaitEvent, not the host) for every copy issued before
//   the call, waited on or not; they return when done. A zero-byte
//   CopyToHost returns at once.
// - Every entry point makes the device current for its CUDA calls. After,
//   it makes the caller's device current again only when that device's
//   primary context is active (cuDevicePrimaryCtxGetState, as PyTorch's
//   MaybeExchangeDevice): a thread that never chose a device (cudaGetDevice
//   says 0) is left on this device, so no context appears on cuda:0 for
//   work on cuda:1. Where the driver cannot say, the caller is left on this
//   device too.
// - An AllocateMany whose arena cannot be allocated names, in its message
//   and in payload kAllocateManyIndexPayload, the first buffer that does not
//   fit in the free memory.
// - Errors name the CUDA call, the device and CUDA's message ("cudaMemcpyAsync
//   on cuda:0: an illegal memory access was encountered"); out of memory is
//   ResourceExhausted, other CUDA failures Internal.
//
// Stats: live_staging_bytes counts staging bytes held by live handles;
// cached blocks are reported by staging_cache_bytes().
// Thread-safety: every method may be called concurrently. The device must
// outlive every buffer it hands out.
#ifndef PTD_CUDA_DEVICE_H_
#define PTD_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/device.h"
#include "ptd/view_geometry.h"

namespace ptd {

// Number of CUDA devices visible to this process; 0 when there is no GPU or
// no driver (never fails).
int CudaDeviceCount();

struct CudaDeviceOptions {
  // Streams that host-to-device copies are spread over (at least 1).
  int streams = 2;
  // Freed staging blocks kept for reuse, in bytes; beyond it they are freed
  // (the default holds the default ring, 6 x 16 MiB, with room to spare).
  uint64_t staging_cache_bytes = uint64_t{256} << 20;
};

class CudaDevice final : public Device {
 public:
  // Opens cuda:`index`: the one way to open a CUDA device (OpenDevice
  // ("cuda:N") calls it). Unavailable when CUDA reports no device (no GPU, no
  // driver); InvalidArgument when `index` is not a visible device.
  static absl::StatusOr<std::shared_ptr<CudaDevice>> Open(int index,
                                                          const CudaDeviceOptions& options = {});

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  // Synchronizes, then frees the streams, the events and the staging cache.
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override;
  std::string name() const override;  // "cuda:0 (NVIDIA H200, sm_90)"
  std::optional<uint32_t> compute_capability() const override;
  bool host_accessible() const override { return false; }

  absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) override;
  absl::StatusOr<std::vector<DeviceBuffer>> AllocateMany(absl::Span<const size_t> sizes) override;
  // One cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable) block,
  // carved as AllocateMany carves its arena; cudaHostGetDevicePointer must
  // give the host address back (unified addressing), else Unimplemented.
  // Freed (cudaFreeHost) when its last slice goes; never cached.
  absl::StatusOr<std::vector<DeviceBuffer>> AllocateMappedMany(
      absl::Span<const size_t> sizes) override;
  // cudaMemGetInfo; mappable_bytes is MemAvailable from /proc/meminfo.
  absl::StatusOr<DeviceMemoryInfo> MemoryInfo() override;
  absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) override;
  absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src, size_t nbytes) override;
  absl::StatusOr<std::vector<CopyTicket>> CopyManyToDeviceAsync(
      absl::Span<const CopyRequest> requests) override;
  absl::Status Wait(const CopyTicket& ticket) override;
  absl::Status Synchronize() override;
  absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) override;
  DeviceStats stats() const override;
  bool supports_scatter() const override { return true; }
  absl::StatusOr<std::vector<CopyTicket>> ScatterToDeviceAsync(void* scratch, const void* src,
                                                               size_t nbytes, size_t table_offset,
                                                               size_t count,
                                                               void* dst_base) override;
  // GPUDirect Storage through cuFile, loaded at run time (never linked):
  // PTD_CUFILE_LIBRARY names the library, else "libcufile.so.0" on the
  // loader's search path (the nvidia-cufile wheel's lib/ folder, or the CUDA
  // toolkit's GDS package). FailedPrecondition, saying why, where it cannot
  // be loaded or its driver opened.
  absl::StatusOr<std::unique_ptr<DeviceFileReader>> OpenFileReader(
      int fd, const std::string& name) override;

  // A dense, row-major copy of `view` over the device storage `storage`
  // (element 0 at storage.data()), made on the GPU into a new buffer: a
  // device-to-device copy for a contiguous view, a tiled transpose for a
  // transposed matrix, a gather kernel otherwise. Same result, byte for byte,
  // as MaterializeOnHost (ptd/view_materialize.h), and the same checks
  // (PlanMaterialize). An empty view gives an empty buffer.
  // `storage` may be device memory of this device or page-locked host
  // memory mapped for it (AllocateMappedMany: the kernels read it through
  // its device pointer, over the bus). InvalidArgument for anything else
  // (pageable host memory, another GPU's memory; checked with
  // cudaPointerGetAttributes): a kernel reading it would kill the context.
  // Allocates the result (cudaMalloc) and frees it when dropped (cudaFree
  // synchronizes the device): for many views, use MaterializeInto.
  absl::StatusOr<DeviceBuffer> Materialize(const DeviceBuffer& storage, const ViewSpec& view);

  // As Materialize, into the first PlanMaterialize(view, storage.size())
  // .output_nbytes bytes of `out`, which the caller reuses from view to view:
  //
  //   DeviceBuffer scratch;  // Grown only for a larger view.
  //   for (const LoadedWeight& w : weights.weights()) {
  //     auto plan = PlanMaterialize(w.view(), weights.storage(w).nbytes);
  //     if (scratch.size() < plan->output_nbytes) scratch = *gpu.Allocate(plan->output_nbytes);
  //     absl::Status s = gpu.MaterializeInto(weights.storage(w).buffer, w.view(), scratch);
  //     if (!s.ok()) return s;
  //   }
  //
  // InvalidArgument when `out` is smaller than that, when `storage` is
  // neither device memory of this device nor host memory mapped for it, or
  // when `out` is not device memory of this device (neither is checked for an
  // empty view, which reads and writes nothing). Returns when the copy is
  // done. REQUIRES: `out` does not overlap the view's bytes.
  absl::Status MaterializeInto(const DeviceBuffer& storage, const ViewSpec& view,
                               const DeviceBuffer& out);

  // Bytes of freed staging blocks held for reuse.
  uint64_t staging_cache_bytes() const;
  // Frees the cached staging blocks.
  void TrimStagingCache();
  // cudaMemcpyAsync calls made by CopyManyToDeviceAsync and
  // CopyToDeviceAsync: at most stats().copies (requests), fewer when
  // neighbouring requests were merged.
  uint64_t memcpy_calls() const;

 private:
  struct Impl;
  explicit CudaDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptd

#endif  // PTD_CUDA_DEVICE_H_
