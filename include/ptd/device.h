// Device: where loaded weights live. The seam between the loader and the
// memory it fills: host memory (HostDevice, ptd/host_device.h) or a CUDA GPU
// (CudaDevice, ptd/cuda_device.h, in ptd::cuda). A device named at run time
// ("host", "cuda:0"): OpenDevice (ptd/open_device.h). Test doubles of the
// seam (FaultDevice, AsyncDevice) are in the ptd::testing target,
// <ptd/testing/...>.
//
// Example:
//   std::shared_ptr<Device> device = std::make_shared<HostDevice>();
//   absl::StatusOr<DeviceBuffer> buf = device->Allocate(1 << 20);
//   if (!buf.ok()) return buf.status();  // ResourceExhausted when out of memory.
//   absl::StatusOr<CopyTicket> t = device->CopyToDeviceAsync(buf->data(), src, n);
//   if (!t.ok()) return t.status();
//   absl::Status done = device->Wait(*t);  // `src` must stay put until then.
//   // Most callers never do this by hand: LoadWeights (ptd/loader.h) does.
//
// The shape follows ExecuTorch's executorch::runtime::DeviceAllocator
// (allocate, deallocate, copy host-to-device, copy device-to-host, device
// type and index), so that an adapter between the two is thin, plus what a
// pipelined loader needs: batch allocation (a device may carve one arena),
// pinned staging buffers, asynchronous copies with a ticket to wait on, and
// synchronization.
//
// Ownership: memory comes back as RAII handles (DeviceBuffer, HostBuffer)
// that free it when the last handle to the block goes. A handle keeps a
// pointer to its device: the device must outlive every handle it hands out
// (the loader's LoadedWeights holds a shared_ptr to its device for this).
// Thread-safety: every method may be called concurrently.
#ifndef PTD_DEVICE_H_
#define PTD_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ptd {

// Same numbering as the manifest's device_type (0 CPU, 1 CUDA) and as
// ExecuTorch's etensor::DeviceType.
enum class DeviceKind : int32_t { kHost = 0, kCuda = 1 };

// "host" or "cuda": the kind's name in a device spec (OpenDevice's "cuda:0")
// and in the tools' output.
std::string_view DeviceKindName(DeviceKind kind);

// Where a loaded storage lives (LoadedStorage::residency,
// LoadedWeight::residency):
//   kDevice      the device's own memory (a GPU's cudaMalloc; the host cannot
//                read it);
//   kMappedHost  page-locked host memory mapped into the device's address
//                space (Device::AllocateMappedMany): kernels read it
//                directly over the bus, and the host reads it too;
//   kHost        plain host memory (HostDevice; CPU weights on a GPU load):
//                kernels cannot read it.
enum class Residency : uint8_t { kDevice = 0, kMappedHost = 1, kHost = 2 };

// Every Residency, in the order the tools list them.
inline constexpr Residency kAllResidencies[] = {Residency::kDevice, Residency::kMappedHost,
                                                Residency::kHost};

// "device", "mapped_host" or "host" (ptd-load's JSON and report).
std::string_view ResidencyName(Residency r);

// What Device::MemoryInfo reports, in bytes.
struct DeviceMemoryInfo {
  uint64_t free_bytes = 0;  // Device memory free now (cudaMemGetInfo).
  uint64_t total_bytes = 0;
  // The most host memory that AllocateMappedMany may pin, and where the
  // bound comes from ("MemAvailable in /proc/meminfo"); nullopt when the
  // device cannot tell.
  std::optional<uint64_t> mappable_bytes;
  std::string mappable_source;
};

// Alignment of every device allocation: cudaMalloc's, and more than any
// element type needs.
inline constexpr size_t kDeviceAlignment = 256;

// Alignment of each buffer HostDevice::AllocateMany carves out of its block:
// PyTorch's CPU allocator alignment (c10's gAlignment) and a cache line, more
// than any element type (complex128, 16 bytes) or SIMD load needs. Packing
// small host storages at 64 rather than 256 bytes keeps 100,000 64-byte
// storages in 6.4 MB instead of 25.6 MB.
inline constexpr size_t kHostAlignment = 64;

namespace internal {

// What DeviceBuffer and HostBuffer share: a range of a block that is freed
// when the last range of it goes. Not used on its own.
class BlockRange {
 public:
  void* data() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return block_ != nullptr; }

 protected:
  BlockRange() = default;
  BlockRange(std::shared_ptr<void> block, void* data, size_t size)
      : block_(std::move(block)), data_(data), size_(size) {}
  const std::shared_ptr<void>& block() const { return block_; }

 private:
  std::shared_ptr<void> block_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace internal

// A range of device memory. Sub-ranges of one block (an arena) share it;
// the block is freed when its last DeviceBuffer goes. Movable and copyable
// (copies share the block).
class DeviceBuffer : public internal::BlockRange {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<void> block, void* data, size_t size)
      : BlockRange(std::move(block), data, size) {}

  // Bytes [offset, offset + size) of this buffer, sharing its block.
  // REQUIRES: the range is inside this buffer.
  DeviceBuffer Slice(size_t offset, size_t size) const {
    return DeviceBuffer(block(), static_cast<char*>(data()) + offset, size);
  }
};

// Host memory handed out by a device for staging copies (pinned for CUDA):
// a source of CopyToDeviceAsync, never a destination. Shaped as
// DeviceBuffer, but a different type, so that neither is passed for the
// other.
class HostBuffer : public internal::BlockRange {
 public:
  HostBuffer() = default;
  HostBuffer(std::shared_ptr<void> block, void* data, size_t size)
      : BlockRange(std::move(block), data, size) {}

  // Bytes [offset, offset + size) of this buffer, sharing its block.
  // REQUIRES: the range is inside this buffer.
  HostBuffer Slice(size_t offset, size_t size) const {
    return HostBuffer(block(), static_cast<char*>(data()) + offset, size);
  }
};

// Status payload (type URL) set by AllocateMany on failure: the index of the
// buffer that could not be allocated, in decimal ASCII.
inline constexpr char kAllocateManyIndexPayload[] = "ptd.device/allocate_many_index";

// Identifies an asynchronous copy; Wait() on it.
struct CopyTicket {
  uint64_t id = 0;
  uint32_t stream = 0;
  // Copy calls this ticket's copies took in the device's runtime
  // (cudaMemcpyAsync on CUDA, where requests that follow each other in
  // source and destination go as one); 0 where a copy is a plain memcpy.
  uint32_t runtime_calls = 0;
};

// One host-to-device copy of a batch (CopyManyToDeviceAsync).
struct CopyRequest {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t nbytes = 0;
};

// One piece of ScatterToDeviceAsync's table: `nbytes` at `src_offset` of
// the copied block go to `dst_offset` past the destination base. The table
// lies in the staging block as an array of these (8-byte aligned).
struct ScatterPiece {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t nbytes = 0;
};

// Counters, for tests and reports. Monotonic except the live_* ones.
struct DeviceStats {
  uint64_t allocations = 0;  // Device blocks allocated (cudaMalloc calls).
  uint64_t allocated_bytes = 0;
  uint64_t live_allocations = 0;  // Blocks not yet freed.
  uint64_t live_bytes = 0;
  uint64_t staging_allocations = 0;  // Staging blocks allocated (cudaHostAlloc calls).
  uint64_t live_staging_bytes = 0;
  uint64_t mapped_allocations = 0;  // AllocateMappedMany blocks (cudaHostAlloc calls).
  uint64_t live_mapped_bytes = 0;   // Of those, bytes not yet freed.
  uint64_t copies = 0;              // Host-to-device copies issued.
  uint64_t copied_bytes = 0;
  // Host: bytes of the blocks mapped for AllocateMany that were advised for
  // transparent huge pages (HostMemoryOptions::huge_pages); 0 elsewhere.
  uint64_t huge_page_bytes = 0;
  // Host: bytes of the AllocateMany blocks that a PrepareAllocation hint
  // readied (mapped, and faulted in as far as its thread got); 0 elsewhere.
  uint64_t prepared_bytes = 0;
};

// Reads a file straight into one device's memory: GPUDirect Storage through
// cuFile (Device::OpenFileReader; LoadOptions::io kGds). One per open file;
// Read may be called from several threads at once.
class DeviceFileReader {
 public:
  virtual ~DeviceFileReader() = default;
  // How cuFile moves the bytes: "p2p" (the storage's DMA writes device
  // memory: the nvidia-fs driver is loaded) or "compat" (cuFile's
  // compatibility mode: through host bounce buffers, as a direct read and a
  // copy would).
  virtual std::string_view mode() const = 0;
  // Reads `n` bytes at `file_offset` into `dst`, device memory of this
  // device. Returns the bytes read: `n`, or fewer where the file ends.
  // Errors name the file and what cuFile said.
  virtual absl::StatusOr<size_t> Read(void* dst, size_t n, uint64_t file_offset) = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  // "host", or "cuda:0 (NVIDIA H200, sm_90)".
  virtual std::string name() const = 0;
  // Compute capability as 10 * major + minor (90 for sm_90), for choosing a
  // manifest variant; nullopt for the host.
  virtual std::optional<uint32_t> compute_capability() const { return std::nullopt; }
  // What each buffer of AllocateMany is aligned to: kDeviceAlignment, or
  // kHostAlignment for HostDevice. Allocate always gives kDeviceAlignment.
  virtual size_t buffer_alignment() const { return kDeviceAlignment; }
  // True when the host can read and write this device's memory directly
  // (the loader then reads files straight into it, with no staging).
  virtual bool host_accessible() const = 0;

  // One block of at least `nbytes` (0 is allowed), aligned to
  // kDeviceAlignment. ResourceExhausted when the device is out of memory.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t nbytes) = 0;

  // One buffer per size, each aligned to buffer_alignment(). The default
  // allocates each separately; a device may carve them out of one arena.
  // On failure nothing stays allocated; when one buffer's allocation failed,
  // the Status should carry payload kAllocateManyIndexPayload (the default
  // sets it) so that callers can name what that buffer was for.
  virtual absl::StatusOr<std::vector<DeviceBuffer>> AllocateMany(absl::Span<const size_t> sizes);

  // Host memory that this device's kernels read directly (CUDA: page-locked
  // with cudaHostAllocMapped | cudaHostAllocPortable, the pointer the
  // device uses being the host's, as under unified addressing): one buffer
  // per size, each aligned to kDeviceAlignment, readable and writable by
  // the host at once (the loader reads files straight into it). On failure
  // nothing stays allocated (and the Status carries
  // kAllocateManyIndexPayload as AllocateMany's does). ResourceExhausted
  // when the memory cannot be pinned. The default: Unimplemented.
  virtual absl::StatusOr<std::vector<DeviceBuffer>> AllocateMappedMany(
      absl::Span<const size_t> sizes);

  // Free and total device memory, and the bound on what AllocateMappedMany
  // may pin. The default: Unimplemented (the loader then cannot place
  // weights by a budget on this device).
  virtual absl::StatusOr<DeviceMemoryInfo> MemoryInfo();

  // For a host-accessible device: [p, p + n) is about to be written through
  // host pointers (the loader calls it before each direct read). Every page
  // of the range must overlap a buffer this device returned; the bytes there
  // are left as they are. HostDevice pre-faults the range (see
  // HostMemoryOptions::populate); ResourceExhausted when the memory is not
  // there. The default does nothing.
  virtual absl::Status PrepareWrite(void* p, size_t n);

  // A hint, given before a load verifies its files: an AllocateMany of
  // about `bytes` in all is likely soon. A device may ready that memory
  // meanwhile (HostDevice faults a block in on a thread of its own, while
  // the verification leaves a core idle); an AllocateMany that fits takes
  // it, and one that does not gets fresh memory as always. 0 drops what an
  // earlier hint readied (the load will not allocate). The default does
  // nothing.
  virtual void PrepareAllocation(uint64_t bytes);

  // Host memory for staging copies (page-locked where that matters). A
  // device may cache and reuse freed staging blocks across loads.
  virtual absl::StatusOr<HostBuffer> AllocateStaging(size_t nbytes) = 0;

  // Starts copying `nbytes` from host `src` to device `dst`. `src` must stay
  // valid and unchanged until Wait() on the ticket returns OK.
  virtual absl::StatusOr<CopyTicket> CopyToDeviceAsync(void* dst, const void* src,
                                                       size_t nbytes) = 0;
  // Starts every copy of `requests` (say, the pieces of one staging buffer)
  // and returns tickets that together cover them: once Wait() returned OK on
  // each, every copy of the batch is done. The default calls
  // CopyToDeviceAsync per request and returns every ticket; a device may put
  // the batch on one stream behind one ticket (CudaDevice: one event). On
  // failure no copy of the batch is left in flight.
  virtual absl::StatusOr<std::vector<CopyTicket>> CopyManyToDeviceAsync(
      absl::Span<const CopyRequest> requests);
  // Blocks until the ticket's copy (and those before it on its stream) are
  // done; the copy's error if it failed.
  virtual absl::Status Wait(const CopyTicket& ticket) = 0;
  // Blocks until every copy issued so far is done.
  virtual absl::Status Synchronize() = 0;

  // Copies device memory back to the host, synchronously (digests, tests).
  // It sees every copy issued before it, waited on or not.
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t nbytes) = 0;

  virtual DeviceStats stats() const = 0;

  // Whether ScatterToDeviceAsync works here (CudaDevice: a copy and a
  // kernel). Default: false.
  virtual bool supports_scatter() const { return false; }
  // Copies `nbytes` of staging memory `src` (AllocateStaging's) into
  // `scratch` (device memory of this device, at least `nbytes`) with one
  // copy, then moves each of the `count` pieces of the table at
  // `table_offset` in that block (ScatterPiece, 8-byte aligned) from the
  // scratch to `dst_base` + its dst_offset, on the device: one copy call
  // for pieces that lie apart in device memory (storages at 64-byte
  // alignment from a file packed at 16). The tickets cover the copy and the
  // moves; `src` and `scratch` stay in use until they are waited on.
  // Default: Unimplemented.
  virtual absl::StatusOr<std::vector<CopyTicket>> ScatterToDeviceAsync(
      void* scratch, const void* src, size_t nbytes, size_t table_offset, size_t count,
      void* dst_base);

  // A reader from the file open as `fd` (named `name` in messages) straight
  // into this device's memory, where the device has one (CudaDevice: cuFile,
  // loaded at run time). Default: Unimplemented, saying why.
  virtual absl::StatusOr<std::unique_ptr<DeviceFileReader>> OpenFileReader(int fd,
                                                                           const std::string& name);
};

}  // namespace ptd

#endif  // PTD_DEVICE_H_
