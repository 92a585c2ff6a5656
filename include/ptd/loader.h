// The loader: verified weights into device memory, each stored storage once,
// each weight handed out as a strided view over its storage.
//
// Example:
//   auto device = std::make_shared<HostDevice>();
//   auto weights = LoadWeights(BundlePaths{.ptd = "m.ptd", .manifest = "m.manifest"}, device);
//   const LoadedWeight* w = weights->Find("layers.0.attn.q_proj.weight");
//   // w->data, w->sizes, w->strides, w->dtype: a tensor over device memory.
//
// What a load does, in order (docs/SPEC.md sections 2, 3, 5; the stages
// are runtime/loader/{plan,place,transfer,assemble}.cc, docs/ARCHITECTURE.md):
//   verify    the bundle, or the manifest against the source's sizes; a
//             file that breaks a rule allocates nothing;
//   plan      the weights wanted (a subset by fqn; library-local constants
//             of the variant chosen for the device), one storage per
//             storage key (entries naming one key share it; keys naming one
//             stored segment too with LoadOptions::share_segments), and the
//             reads: neighbouring small storages
//             coalesced into one read, large ones split into chunks;
//   place     where each storage goes: on a device that is not the host,
//             with LoadOptions::device_budget_bytes or host_fqns, device
//             memory or host memory mapped for the device (Residency),
//             checked against the device's free memory and the host's
//             pinnable memory before anything is allocated; then, with
//             LoadOptions::map_file, host storages become views of private
//             file mappings, populated from the page cache; then one
//             Device::AllocateMany per device (one size per storage not
//             mapped) and one Device::AllocateMappedMany for the storages
//             placed in mapped host memory;
//   transfer  from the ByteSource (pread; through a mapping only for the
//             storages that map_file mapped). On a host-accessible device,
//             several threads read straight into the destinations, each
//             read's destinations handed to Device::PrepareWrite just
//             before it (HostDevice faults their pages in there, so the
//             first weight does not wait for the whole allocation to be
//             populated). Storages in mapped host memory are read straight
//             into it the same way. Otherwise reader threads fill a bounded
//             ring of staging buffers that the calling thread copies to the
//             device (CopyToDeviceAsync) and waits on before reuse: host
//             memory beyond the destinations is the ring plus metadata,
//             whatever the file size;
//   assemble  the result: each weight a view over its storage, and the
//             lookup tables.
// A failure anywhere (allocation, prepare, read, copy, wait, a file that
// shrank, cancellation) waits for copies in flight, frees everything the
// load allocated and returns a Status naming the storage key and the phase.
//
// Weights whose device_type is CPU (0) go to host memory whichever device
// is chosen (the result keeps a HostDevice for them).
//
// Runtime-owned entries (fqn "__et_offgraph_kv_*", the off-graph KV cache;
// docs/SPEC.md section 2) have a verified view but no stored bytes: they are
// neither read nor allocated, and their storage keys are never looked up in
// the source. LoadedWeights::runtime_owned() lists them so that a runtime
// can allocate and bind them itself.
//
// Lifetime: LoadedWeights holds its storages and a shared_ptr to each device
// they live on; views stay valid as long as it does. Movable, not copyable;
// destroying or assigning over one frees its storages before it lets go of
// their devices.
// Thread-safety: LoadWeights may run concurrently; a LoadedWeights is
// immutable after return.
#ifndef PTD_LOADER_H_
#define PTD_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/device.h"
#include "ptd/manifest.h"
#include "ptd/model_signature.h"
#include "ptd/view_geometry.h"
#include "ptd/weight_bundle.h"

namespace ptd {

inline constexpr size_t kDefaultLoadThreads = 4;
// The ring of the default load (ring_slots 0: threads + 2).
inline constexpr size_t kDefaultRingSlots = kDefaultLoadThreads + 2;
inline constexpr size_t kDefaultRingSlotBytes = size_t{16} << 20;
inline constexpr size_t kDefaultMaxReadBytes = size_t{4} << 20;
inline constexpr size_t kDefaultMaxGapBytes = size_t{4} << 10;
// Reader threads per LoadOptions::threads while the direct engine reads into
// host-accessible memory: a direct read waits on the disk, not on a core,
// and the disk serves faster with more bytes in flight (a cold 1 GiB file
// here: bench/results/notes.md).
inline constexpr size_t kDirectReadersPerThread = 4;

// How a load reads the file's bytes (LoadOptions::io; docs/SPEC.md's loader
// section). Every engine puts the same bytes in the same place; they differ
// in what they cost and what they leave in the page cache.
//   kBuffered  pread(2) through the page cache, which keeps a copy.
//   kDirect    O_DIRECT reads past the page cache, of 4 KiB-aligned ranges
//              that cover the storages (never a byte twice), several in
//              flight (io_uring where the kernel allows it, else the reader
//              threads). The page cache is left as the load found it. A
//              filesystem that refuses O_DIRECT, or keeps files in memory
//              (tmpfs), falls back to kBuffered, and says so.
//   kGds       GPUDirect Storage: cuFile reads the device's storages straight
//              into device memory (Device::OpenFileReader; libcufile is
//              loaded at run time, never linked: PTD_CUFILE_LIBRARY, else
//              libcufile.so.0). Where cuFile cannot load, runs in its
//              compatibility mode (no nvidia-fs driver) or fails a read, the
//              device's storages go through the staging ring, read by
//              kDirect, and the report says why. Other storages (host and
//              mapped memory) are read kDirect.
//   kAuto      per file and range: ranges mostly in the page cache are read
//              buffered, the others direct (cachestat(2), else mincore(2),
//              looked at when the load begins); a cold file's device
//              storages go by GPUDirect Storage where cuFile offers its P2P
//              mode. Files under 8 MiB are read buffered.
enum class IoMode : uint8_t { kAuto = 0, kBuffered = 1, kDirect = 2, kGds = 3 };
// "auto", "buffered", "direct", "gds".
std::string_view IoModeName(IoMode mode);
// The mode of a name IoModeName gives; nullopt for any other.
std::optional<IoMode> ParseIoMode(std::string_view name);

// An engine the load gave up for another, and why (LoadStats::io).
struct IoFallback {
  IoMode from = IoMode::kDirect;
  IoMode to = IoMode::kBuffered;
  std::string reason;
};

// How a load's bytes were read (LoadStats::io).
struct IoReport {
  IoMode requested = IoMode::kAuto;
  // Bytes each engine read (a direct read's alignment padding included).
  uint64_t buffered_bytes = 0;
  uint64_t direct_bytes = 0;
  uint64_t gds_bytes = 0;
  // The mode cuFile reported ("p2p" or "compat"); empty when it did not run.
  std::string gds_mode;
  // In the order they happened; never an error for kAuto.
  std::vector<IoFallback> fallbacks;
  // Bytes of the file in the page cache when the load began, when known.
  std::optional<uint64_t> cached_bytes;
  // The file's size (0 for a source that is no file).
  uint64_t file_bytes = 0;
  // How direct reads were queued: "io_uring" or "threads"; empty when none
  // ran.
  std::string queue;
  // Threads that read into host-accessible memory while the direct engine
  // could serve (LoadOptions::threads x kDirectReadersPerThread, at most one
  // per read); 0 when no direct read ran.
  size_t direct_readers = 0;
  // Why kAuto chose as it did, e.g. "cold: 0 of 1073741824 bytes cached".
  std::string choice;
};

struct LoadOptions {
  // Load only these weights (by fqn, in any manifest); empty loads all.
  // Only the storages they need are read. NotFound for an unknown fqn;
  // InvalidArgument for a runtime-owned one (it has no stored bytes), and
  // without a manifest (there are no weights to name).
  std::vector<std::string> fqns;
  // Compute capability for choosing each manifest's variant; overrides the
  // device's. Without either (the host), a single untargeted variant is
  // chosen and otherwise none: then no library-local constant is filtered.
  std::optional<uint32_t> sm;
  // Threads that read (>= 1; 0 is taken as 1). On a host-accessible device
  // the calling thread is one of them (threads - 1 are started; while the
  // direct engine may serve, threads x kDirectReadersPerThread); on a
  // staging device `threads` readers are started and the calling thread
  // issues the copies and waits on them.
  size_t threads = kDefaultLoadThreads;
  // The staging ring of a device that is not host-accessible: slots of
  // ring_slot_bytes each; 0 means threads + 2 slots (default 6 x 16 MiB), so
  // that readers need not wait for copies in flight. Every staged read fits
  // a slot.
  size_t ring_slots = 0;
  size_t ring_slot_bytes = kDefaultRingSlotBytes;
  // Largest single read on the host path: neighbouring small storages are
  // read together up to this size, larger storages in chunks of it.
  size_t max_read_bytes = kDefaultMaxReadBytes;
  // Padding bytes between two storages that a coalesced read may carry.
  size_t max_gap_bytes = kDefaultMaxGapBytes;
  // Called as bytes arrive (done, total), one call at a time, from a loader
  // thread. Returning false cancels the load: Cancelled.
  std::function<bool(uint64_t done, uint64_t total)> progress;
  // Host storages (on a host device, and CPU weights) are mapped from the
  // file instead of read into fresh memory, where the source can map (a
  // .ptd file: FileSource::MapPrivate) and the storage sits at a multiple
  // of kHostAlignment in it (every storage of a file written with 64- or
  // 128-byte segment alignment); others are read as usual. A mapping is
  // private and writable (copy-on-write: the file never changes) and
  // populated from the page cache, so a cached file loads without a copy
  // or fresh memory (LoadStats::mapped, LoadedStorage::mapped). The cost is
  // the mapping's caveat: a page not yet written shows the file as it is,
  // so another process that writes the file in place changes the weights,
  // and one that truncates it makes a later touch raise SIGBUS. Leave it off
  // where files may change under a running process (the default reads).
  bool map_file = false;
  // Device memory the load may take, in bytes, on a device that is not the
  // host (with a budget, the device must offer Device::MemoryInfo and
  // Device::AllocateMappedMany: CudaDevice does). Storages go to device
  // memory in manifest order (each rounded up to kDeviceAlignment) until
  // the next does not fit; that one and the rest go to page-locked host
  // memory mapped for the device (Residency::kMappedHost), which kernels
  // read directly over the bus. A storage that several weights share is
  // placed once. 0 puts every storage in mapped memory; nullopt (the
  // default) every storage on the device, as without this option (no
  // MemoryInfo call; out of device memory is then the allocation's
  // ResourceExhausted). ResourceExhausted before anything is allocated
  // when the budget is over the device's free memory, or the mapped share
  // over the host memory that can be pinned (MemoryInfo's mappable_bytes:
  // MemAvailable); both messages give the shortfall in bytes.
  // InvalidArgument on the host device.
  std::optional<uint64_t> device_budget_bytes;
  // fqn patterns (fnmatch(3): `*`, `?`, `[...]`, e.g. "tok_embeddings.*")
  // whose storages go to mapped host memory before the budget is counted:
  // a storage goes there when any weight on it matches. Without a
  // manifest, the patterns match storage keys. CPU weights (device_type 0)
  // stay in plain host memory. A pattern that matches nothing is no error.
  // InvalidArgument on the host device.
  std::vector<std::string> host_fqns;
  // The mapped share (device_budget_bytes, host_fqns) is pinned in blocks of
  // at most this many bytes (a storage larger than it gets a block of its
  // own; none spans two): one pinned region of hundreds of GiB fails where
  // several smaller ones succeed, and pinning takes about 0.1 s per GB, so
  // the load reads into block k while block k + 1 is pinned. The first
  // block is pinned with the device's allocation (LoadTimings::allocate_s);
  // the rest during the reads (read_s).
  uint64_t mapped_block_bytes = uint64_t{64} << 30;
  // Seconds the caller spent verifying the bundle just before this call
  // (RunVerify, then LoadWeights(outcome.bundle, ...), as ptd-load and
  // Python's ptd.load do). LoadTimings counts them as verify_s and in
  // total_s and first_weight_s, as LoadWeights(paths) counts the
  // verification it runs itself. InvalidArgument unless >= 0.
  double verify_s = 0;
  // Keys whose bytes sit in one stored segment share one storage (one
  // allocation, one read) instead of one storage each. The exporter stores
  // identical bytes once (its named-data store deduplicates by content), so
  // keys share a segment whenever their initial bytes are equal: tied
  // weights, but also every layer's zero-filled KV cache. An AOTInductor
  // program writes the buffers it mutates (KV caches, running statistics)
  // in place, into the memory it was handed: shared, one layer's write
  // would be every layer's. So by default each key gets its own storage, as
  // upstream's runtime allocates one per key; turn this on only for weights
  // that no program writes (it saves the memory and reads of the
  // duplicates). Entries (fqns) naming one key always share its storage:
  // they are views into one constant, as in upstream.
  bool share_segments = false;
  // How the file's bytes are read (IoMode): kAuto by default. Storages
  // mapped from the file (map_file) and sources that are no file (an
  // ExecuTorch NamedDataMap) are read as they always are; kDirect or kGds
  // then report a fallback.
  IoMode io = IoMode::kAuto;
  // A signed model (OpenSSF model signing; ptd/model_signature.h): when
  // signature.enabled(), the load checks the signature against the trust
  // material (A1-A3, A7), the folder against the signature (A4, A6), hashes
  // every other file of the folder, and hashes the .ptd on the same reads
  // that load it (A5): no byte of it is read twice, the shards' digests on
  // the reader threads. Any broken rule fails the load, which then hands
  // out nothing (its memory is freed). LoadStats::signature says what ran.
  // Needs a source that reads a file (LoadWeights of paths or a bundle).
  SignatureOptions signature;
};

// Seconds per phase. read is the wall time of the transfer phase, in which
// reads, copies and waits overlap; copy and wait are the time the calling
// thread spent issuing copies and waiting on them (0 on the host path).
struct LoadTimings {
  double verify_s = 0;
  double plan_s = 0;  // The plan, and the place stage's decisions and checks.
  double allocate_s = 0;
  double read_s = 0;
  double copy_s = 0;
  double wait_s = 0;
  // LoadOptions::map_file: mapping and populating the mapped storages.
  double map_s = 0;
  // After the reads: the result's names, dims and lookup tables.
  double finish_s = 0;
  double total_s = 0;
  // From the start of the call (the verification it ran, or the caller's
  // LoadOptions::verify_s, included) until the first storage was complete
  // in memory; total_s when none was loaded.
  double first_weight_s = 0;
};

// Storages in one place and their bytes (LoadStats::placed).
struct PlacementStats {
  uint64_t storages = 0;
  uint64_t bytes = 0;
};

struct LoadStats {
  uint64_t weights = 0;  // Views handed out.
  // Of those, views whose storage an earlier view already uses (upstream's
  // "reused": keys and entries that share one stored segment).
  uint64_t reused = 0;
  uint64_t runtime_owned = 0;  // Runtime-owned entries listed, not loaded.
  uint64_t storages = 0;       // Distinct storages loaded (= buffers allocated).
  uint64_t bytes = 0;          // Bytes of those storages.
  uint64_t allocations = 0;    // AllocateMany calls (one per device used).
  uint64_t reads = 0;          // Calls into the ByteSource.
  uint64_t bytes_read = 0;     // Bytes those calls read (padding included).
  // Of those, bytes read into scratch memory and copied out on the host: a
  // packed read whose destinations do not lie as the file does (host
  // memory, mapped host memory and file-laid-out runs take none).
  uint64_t bytes_via_scratch = 0;
  uint64_t copies = 0;  // Host-to-device copies issued.
  // The copy calls those copies took in the device's runtime
  // (cudaMemcpyAsync calls on CUDA; CopyTicket::runtime_calls), 0 on the
  // host.
  uint64_t copy_calls = 0;
  uint64_t mapped = 0;  // Storages mapped from the file (LoadOptions::map_file).
  uint64_t mapped_bytes = 0;
  uint64_t mappings = 0;  // Mappings those storages share.
  // Where the storages went (LoadedStorage::residency); they add up to
  // `storages` and `bytes`. (`mapped` above counts LoadOptions::map_file's
  // file mappings, which are plain host memory.)
  PlacementStats placed_device;
  PlacementStats placed_mapped_host;
  PlacementStats placed_host;
  // The read engines that ran (LoadOptions::io).
  IoReport io;
  // The signature check (LoadOptions::signature); checked false without.
  SignatureReport signature;

  const PlacementStats& placed(Residency r) const {
    return r == Residency::kDevice       ? placed_device
           : r == Residency::kMappedHost ? placed_mapped_host
                                         : placed_host;
  }
  PlacementStats& placed(Residency r) {
    return const_cast<PlacementStats&>(std::as_const(*this).placed(r));
  }
};

// One stored storage in memory. Names are views that live as long as the
// LoadedWeights.
struct LoadedStorage {
  absl::Span<const std::string_view> keys;  // Every loaded key that names it.
  uint64_t nbytes = 0;
  DeviceKind device = DeviceKind::kHost;
  // Which device of that kind holds it (Device::index(): cuda:N's N; 0 for
  // the host), so that a result can say where each storage lives when
  // several GPUs load one model.
  int device_index = 0;
  // Device memory, host memory mapped for the device (its kernels read it;
  // LoadOptions::device_budget_bytes, host_fqns) or plain host memory (the
  // host device, CPU weights). `device` is the device's kind for the first
  // two: DeviceOf() is the device itself.
  Residency residency = Residency::kHost;
  bool host_accessible = true;  // data() can be read by the host.
  bool mapped = false;          // A view of a file mapping (LoadOptions::map_file).
  DeviceBuffer buffer;
};

// One weight: a strided view over a loaded storage. Strings and dims are
// views that live as long as the LoadedWeights that holds it.
struct LoadedWeight {
  std::string_view fqn;
  std::string_view storage_key;
  std::string_view source;  // The manifest's: "manifest" or "pte:<method>:<i>".
  int32_t dtype = 0;
  uint16_t element_size = 1;  // At most 16 (complex128).
  // Where the storage lives (its LoadedStorage::residency). `data` is
  // readable by the device's kernels for kDevice and kMappedHost, and by
  // the host for kMappedHost and kHost.
  Residency residency = Residency::kHost;
  absl::Span<const int64_t> sizes;
  absl::Span<const int64_t> strides;  // Elements.
  int64_t storage_offset = 0;         // Elements.
  // Storage base + storage_offset * element_size (device memory, or host
  // memory as `residency` says).
  void* data = nullptr;
  uint32_t storage = 0;                   // Index into LoadedWeights::storages().
  DeviceKind device = DeviceKind::kHost;  // Beside `storage` (packing: bench/results/notes.md).

  // The view relative to its storage (storage_offset included).
  ViewSpec view() const {
    ViewSpec v;  // No designated initializers: this header is C++17.
    v.element_size = element_size;
    v.storage_offset = storage_offset;
    v.sizes = sizes;
    v.strides = strides;
    return v;
  }
};

// A runtime-owned entry: the view a runtime allocates and binds itself
// (nothing is loaded for it). Strings and dims are views that live as long
// as the LoadedWeights that lists it.
struct RuntimeOwnedWeight {
  std::string_view fqn;
  std::string_view storage_key;
  std::string_view source;  // As LoadedWeight::source.
  int32_t dtype = 0;
  uint32_t element_size = 1;
  absl::Span<const int64_t> sizes;
  absl::Span<const int64_t> strides;      // Elements.
  int64_t storage_offset = 0;             // Elements.
  int32_t device_type = kDeviceTypeCuda;  // The manifest's.
  uint64_t storage_nbytes = 0;            // The manifest's.
  uint64_t required_nbytes = 0;           // What the view spans (G2 holds).
};

namespace internal {
class LoadedWeightsAssembler;  // Builds the result (runtime/loader/assemble.h).
}  // namespace internal

class LoadedWeights {
 public:
  // A moved-from LoadedWeights is empty (no weights, storages or device).
  LoadedWeights(LoadedWeights&& other) noexcept;
  // Releases this result's storages before its devices (a buffer's deleter
  // uses its device), then takes `other`'s contents.
  LoadedWeights& operator=(LoadedWeights&& other) noexcept;
  LoadedWeights(const LoadedWeights&) = delete;
  LoadedWeights& operator=(const LoadedWeights&) = delete;
  ~LoadedWeights();

  // Every loaded weight, manifest by manifest in entry order.
  const std::vector<LoadedWeight>& weights() const;
  const std::vector<LoadedStorage>& storages() const;
  // The runtime-owned entries of the manifests, in manifest and entry
  // order, when every weight was loaded (empty for a load of LoadOptions::
  // fqns: none was asked for).
  const std::vector<RuntimeOwnedWeight>& runtime_owned() const;

  // The weight named `fqn` (of the first manifest that has it), or null.
  // O(1) (the first lookup of any kind builds the indexes, O(weights)).
  // Thread-safe.
  const LoadedWeight* Find(std::string_view fqn) const;
  // The weight of one manifest (`source` as in LoadedWeight::source).
  const LoadedWeight* Find(std::string_view source, std::string_view fqn) const;
  // The storage a key's bytes were loaded into, or null. O(1).
  const LoadedStorage* FindStorage(std::string_view key) const;
  const LoadedStorage& storage(const LoadedWeight& w) const { return storages()[w.storage]; }

  // The variant chosen for each manifest (parallel to the bundle's
  // manifests); nullopt when none was chosen (no capability, several
  // variants).
  const std::vector<std::optional<size_t>>& chosen_variants() const;

  const std::shared_ptr<Device>& device() const;
  // The device a storage lives on: device(), or the host device that holds
  // CPU weights.
  Device& DeviceOf(const LoadedStorage& s) const;

  const LoadTimings& timings() const;
  const LoadStats& stats() const;

 private:
  friend class internal::LoadedWeightsAssembler;
  struct Impl;  // runtime/loader/loaded_weights.h
  explicit LoadedWeights(std::unique_ptr<Impl> impl);
  const Impl& impl() const;

  std::unique_ptr<Impl> impl_;
};

// The load options that only a CUDA device can take: a budget or fqns that
// place storages in host memory mapped for the GPU.
enum class LoadOptionField { kDeviceBudgetBytes, kHostFqns };

// The first option of `options` that cannot apply to a device of `kind`
// (LoadOptionField), or nullopt when every one applies. The one rule among
// the options: LoadWeights refuses such a load with InvalidArgument naming
// the LoadOptions field, and each front end words the same finding in its
// own vocabulary (ptd-load's --device-budget, Python's device_budget=).
std::optional<LoadOptionField> InapplicableLoadOption(DeviceKind kind, const LoadOptions& options);

// Three ways in, by what the caller holds (never by memory footprint):
//   paths            LoadWeights(BundlePaths{...}, device): opens, verifies
//                    and loads;
//   a bundle         LoadWeights(bundle, device): one already verified
//                    (WeightBundle::Open, or VerifyOutcome::bundle);
//   manifest bytes   LoadWeights(manifest, source, device): the ExecuTorch
//                    backend's entry point, over any ByteSource.

// Loads a bundle opened with WeightBundle::Open (a bundle that holds errors
// is FailedPrecondition). The result shares `bundle` (it keeps it alive): its
// weights' names and dims and its storages' keys are views into the bundle's
// manifests and container. Without manifests, every key's bytes are loaded
// (one storage per key, or per segment with share_segments), found with
// FindStorage, their keys
// copied. Reads go through a pread source: the bundle's own when it has no
// mapping, else the file reopened by path (DataLoss when its size changed
// since verification). InvalidArgument for a null bundle.
//
//   auto opened = WeightBundle::Open(paths);
//   auto bundle = std::make_shared<const WeightBundle>(*std::move(opened));
//   auto weights = LoadWeights(bundle, device);
absl::StatusOr<LoadedWeights> LoadWeights(std::shared_ptr<const WeightBundle> bundle,
                                          std::shared_ptr<Device> device,
                                          const LoadOptions& options = {});

// Opens (pread throughout), verifies and loads.
absl::StatusOr<LoadedWeights> LoadWeights(const BundlePaths& paths, std::shared_ptr<Device> device,
                                          const LoadOptions& options = {});

// The ExecuTorch backend's entry point: a manifest's bytes and a source of
// its storages. Verifies first (M*, then G1-G4 and X1 against the source's
// sizes: WeightSet::ResolveSizes), then loads. The manifest's source name in
// the result is "manifest". Over an ExecuTorch NamedDataMap:
// LoadWeightsFromNamedDataMap (ptd/executorch/named_data_map_source.h).
absl::StatusOr<LoadedWeights> LoadWeights(absl::Span<const uint8_t> manifest,
                                          const ByteSource& source, std::shared_ptr<Device> device,
                                          const LoadOptions& options = {});

// SHA-256 of a weight's view gathered in row-major order from loaded memory
// (read back with Device::CopyToHost, in bounded pieces, when the memory is
// not host-accessible): equals the verifier's digest of the same view.
absl::StatusOr<std::string> DigestLoadedWeight(const LoadedWeights& weights,
                                               const LoadedWeight& weight);
// SHA-256 of a storage's bytes in memory.
absl::StatusOr<std::string> DigestLoadedStorage(const LoadedWeights& weights,
                                                const LoadedStorage& storage);

}  // namespace ptd

#endif  // PTD_LOADER_H_
