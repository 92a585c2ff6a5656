// The loader over ExecuTorch's NamedDataMap: a ptd::ByteSource that reads
// storage keys through any executorch::runtime::NamedDataMap (upstream's
// FlatTensorDataMap, ptd::ContainerDataMap, a backend's own), and the entry
// point a backend's init() calls to load a CUDA weight manifest from one.
//
//   // In a backend's init(), with the manifest bytes from the processed blob
//   // and the NamedDataMap the runtime hands the backend:
//   absl::StatusOr<ptd::LoadedWeights> w = ptd::LoadWeightsFromNamedDataMap(
//       manifest_bytes, *named_data_map, device);
//
// How keys are read (the NamedDataMap interface has no ranged read):
//   size    get_data(key).size(): the whole stored segment, as upstream and
//           ContainerDataMap return it; looked up once per key and cached.
//           get_tensor_layout() is never called: upstream's FlatTensorDataMap
//           dereferences null for a key stored without a layout (every CUDA
//           weight key). Where get_data() copies (a FileDataLoader behind
//           upstream's map) sizing reads each key once; an mmap-backed map
//           (MmapDataLoader, ContainerDataMap) hands out views and reads
//           nothing.
//   whole   a read of a whole key: get_data() and one memcpy; or, with
//           NamedDataMapSourceOptions::use_load_data_into, load_data_into()
//           straight into the destination (the staging slot). Only for maps
//           whose load_data_into() handles keys without a layout
//           (ContainerDataMap does; upstream's segfaults on them).
//   chunks  a read of part of a key (the loader splits storages larger than
//           a staging slot): get_data() once per key, held while its chunks
//           are read and freed after the last one. A map whose get_data()
//           copies then holds one copy of each key being read in chunks, on
//           top of the loader's staging ring; zero-copy maps hold none.
//           A load that fails part-way may leave such a buffer held until
//           the source is destroyed (LoadWeightsFromNamedDataMap destroys
//           its source before it returns).
// Locate() is not offered: a NamedDataMap does not say which keys share a
// segment, so each key is a storage of its own and is read alone.
//
// Errors name the source, the call, the key and ExecuTorch's error:
// "named data map: get_data of key 'k' failed: Error::AccessFailed (0x22)". NotFound
// for an absent key (get_data's Error::NotFound), ResourceExhausted for
// MemoryAllocationFailed, InvalidArgument for InvalidArgument, DataLoss for
// the rest (the map could not produce the key's bytes).
//
// Thread-safety: the source's methods may be called concurrently (the
// loader's reader threads do), so the map's get_data() and load_data_into()
// must allow concurrent calls: ContainerDataMap's do, and upstream's
// FlatTensorDataMap only looks keys up and reads through its DataLoader
// (FileDataLoader: pread; MmapDataLoader: views). The map must outlive the
// source.
#ifndef PTD_EXECUTORCH_NAMED_DATA_MAP_SOURCE_H_
#define PTD_EXECUTORCH_NAMED_DATA_MAP_SOURCE_H_

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/named_data_map.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/device.h"
#include "ptd/loader.h"

namespace ptd {

struct NamedDataMapSourceOptions {
  // What messages call the source (ByteSource::name()).
  std::string name = "named data map";
  // Read whole keys with load_data_into() rather than get_data() + memcpy.
  // Only for maps whose load_data_into() takes keys without a layout and a
  // size equal to get_data()'s (ContainerDataMap; not upstream's
  // FlatTensorDataMap, which segfaults on CUDA weight keys).
  bool use_load_data_into = false;
};

// A ByteSource over `map` (see above). `map` must outlive it.
std::unique_ptr<ByteSource> MakeNamedDataMapByteSource(
    const ::executorch::runtime::NamedDataMap& map, NamedDataMapSourceOptions options = {});

// The absl::Status for ExecuTorch error `error` of `call` ("get_data") on
// `key` of the source `name`; OK for Error::Ok.
absl::Status NamedDataMapError(::executorch::runtime::Error error, const std::string& name,
                               const char* call, std::string_view key);

// The backend's entry point: verifies the manifest (M*, then G1-G4 and X1/G3
// against the sizes the map gives: WeightSet::ResolveSizes; nothing is
// allocated when a rule is broken), then loads its weights (all, or
// options.fqns) onto `device` through a MakeNamedDataMapByteSource source.
// A key the map fails to produce (other than NotFound, which is X1) fails
// the load with the map's error naming the key. The result's manifest
// source name is "manifest". `map` is only used during the call.
absl::StatusOr<LoadedWeights> LoadWeightsFromNamedDataMap(
    absl::Span<const uint8_t> manifest, const ::executorch::runtime::NamedDataMap& map,
    std::shared_ptr<Device> device, const LoadOptions& options = {},
    const NamedDataMapSourceOptions& source_options = {});

}  // namespace ptd

#endif  // PTD_EXECUTORCH_NAMED_DATA_MAP_SOURCE_H_
