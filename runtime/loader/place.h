// The second stage of a load, private to ptd::loader: place. Where each
// planned storage goes (device memory, host memory mapped for the device,
// plain host memory), decided and checked against the device before
// anything is allocated; then, with LoadOptions::map_file, the host storages
// that the file can back become views of file mappings; then one allocation
// per destination gives every other storage its buffer.
#ifndef PTD_RUNTIME_LOADER_PLACE_H_
#define PTD_RUNTIME_LOADER_PLACE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "ptd/byte_source.h"
#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/weight_bundle.h"
#include "runtime/loader/plan.h"

namespace ptd::internal {

// Where the storages of a plan go, and their buffers once there.
struct PlacedStorages {
  // Holds the Residency::kHost storages (created by Allocate when there
  // are some). First, so that it outlives `buffers`, whose deleters use it.
  std::shared_ptr<Device> host_device;
  // Per storage: the memory it ends up in.
  std::vector<Residency> residency;
  // The storages still to be allocated and read, per allocation: the
  // load's device (AllocateMany; on the host device, host memory), host
  // memory mapped for it (AllocateMappedMany), and the host device
  // (Residency::kHost). Allocate sorts each in file order.
  std::vector<uint32_t> to_device;
  std::vector<uint32_t> to_mapped_host;
  std::vector<uint32_t> to_host;
  // LoadOptions::map_file: storages mapped from the file, complete without
  // a read.
  std::vector<uint32_t> file_mapped;
  // Per storage, once mapped or allocated.
  std::vector<DeviceBuffer> buffers;
  // The mapped share held against the process's pinnable memory from the
  // check until it is allocated (ReserveMappedHost); null without one.
  std::shared_ptr<void> mapped_reservation;
  // The mapped share in blocks of at most LoadOptions::mapped_block_bytes,
  // in file order (Allocate splits to_mapped_host so and allocates the
  // first; AllocateMappedBlock the others, during the transfer).
  std::vector<std::vector<uint32_t>> mapped_blocks;
  // Runs given out so far (StorageJob::run), unique across allocations.
  uint32_t runs = 0;
};

// InvalidArgument for LoadOptions::device_budget_bytes or host_fqns on the
// host device. A load checks it before it plans, once: Place assumes it.
absl::Status CheckPlaceOptions(const Device& device, const LoadOptions& options);

// Decides where each storage of `plan` goes. With LoadOptions::
// device_budget_bytes or host_fqns (which CheckPlaceOptions accepted):
// the storages of a weight (without a manifest, a key) that host_fqns names
// go to mapped memory first, the others to device memory in manifest order
// while they fit the budget (internal::PlaceStorages), checked against the
// device's MemoryInfo (ResourceExhausted, naming the shortfall).
absl::StatusOr<PlacedStorages> Place(const LoadPlan& plan, bool all_keys, Device& device,
                                     const PlaceOptions& options);

// LoadOptions::map_file: the host storages (the host device's, and
// Residency::kHost) that `source` can map become views of private file
// mappings, one per run of neighbours in the file; they leave the lists to
// allocate for `file_mapped`. A source that cannot map leaves them all.
absl::Status MapFromFile(const ByteSource& source, size_t threads, const Device& device,
                         std::vector<StorageJob>* storages, PlacedStorages* placed,
                         LoadStats* stats);

// Before a load verifies its files: tells `device` about what loading all
// of them into fresh memory allocates, the .ptd's size (its stored bytes,
// packed as a device packs them, fit in it unless its segments are packed
// tighter than the device's alignment; a load that needs more gets fresh
// memory), so that the device can ready that memory while the files verify
// (Device::PrepareAllocation).
// Nothing when the load names its weights (LoadOptions::fqns: it may need
// far less) or maps the file (LoadOptions::map_file: no fresh memory), or
// when the .ptd's size cannot be read. True when it hinted: the caller then
// calls device.PrepareAllocation(0) once the load is over (or will not
// happen), to drop what the load did not take.
bool HintLoadAllocation(Device& device, const BundlePaths& paths, const LoadOptions& options);

// One allocation per destination (the device, the host device), each
// storage's buffer in file order; the mapped share split into blocks
// (PlacedStorages::mapped_blocks) of which the first is allocated. Sets each
// allocated StorageJob::dest. Errors name the storage and the device.
absl::Status Allocate(Device& device, std::vector<StorageJob>* storages,
                      const std::vector<Residency>& bound, uint64_t mapped_block_bytes,
                      PlacedStorages* placed, LoadStats* stats);

// Allocates mapped block `k` (one AllocateMappedMany); the last one ends
// the mapped reservation. Only touches the block's own storages, buffers
// and StorageJob::dest, the run counter and stats->allocations: it may run
// while another block's storages are read.
absl::Status AllocateMappedBlock(Device& device, size_t k, std::vector<StorageJob>* storages,
                                 PlacedStorages* placed, LoadStats* stats);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_PLACE_H_
