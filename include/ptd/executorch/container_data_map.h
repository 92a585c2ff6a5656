// ContainerDataMap: ExecuTorch's NamedDataMap over a verified ptd::Container.
//
// Hand it to executorch::runtime::Program::load_method() as the external
// data map of a program whose weights live in a .ptd file. Compared with
// upstream's executorch::extension::FlatTensorDataMap over the same file:
//   - the file is checked against every rule of docs/SPEC.md section 1 once,
//     at Open(), before the runtime sees a byte of it;
//   - lookups are O(1) (a hash index; upstream scans the keys linearly);
//   - get_tensor_layout() answers Error::NotFound for a key stored without a
//     layout (XNNPACK and CUDA weights), where upstream dereferences null.
//     Like upstream, it answers Error::InvalidArgument for a zero-byte layout
//     whose sizes before the 0 multiply past 64 bits (C8 accepts it: its
//     element count is 0; ExecuTorch's TensorLayout::create does not);
//   - get_data() hands out zero-copy views of the mapping (a heap copy from
//     a pread source); each buffer keeps the container alive, so it may
//     outlive the map;
//   - load_data_into() refuses a size other than the key's byte count
//     (upstream accepts a smaller buffer and writes past it).
// Absent keys are Error::NotFound everywhere, as the runtime requires.
//
// Example:
//   auto map = ptd::ContainerDataMap::OpenFile("model.ptd");  // Every rule checked.
//   if (!map.ok()) return map.status();                       // DataLoss "... (C5)"
//   auto method = program->load_method("forward", &memory_manager, nullptr, map->get());
//
// Byte counts and offsets follow upstream: get_data() returns the whole
// segment; load_data_into() copies the layout's nbytes (the segment size
// for a key without a layout) from the start of the segment.
//
// Thread-safety: every method is const and safe to call concurrently.
// Requires the executorch package (the ptd::executorch target).
#ifndef PTD_EXECUTORCH_CONTAINER_DATA_MAP_H_
#define PTD_EXECUTORCH_CONTAINER_DATA_MAP_H_

#include <executorch/runtime/core/named_data_map.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/model_signature.h"

namespace ptd {

class ContainerDataMap final : public ::executorch::runtime::NamedDataMap {
 public:
  enum class Access { kMmap, kPread };

  // Opens and verifies `path` (Container::Open). Fails with the container's
  // status: NotFound for a missing file, DataLoss naming the broken rule.
  static absl::StatusOr<std::unique_ptr<ContainerDataMap>> OpenFile(const std::string& path,
                                                                    Access access = Access::kMmap);
  // The same for a signed model (ptd/model_signature.h): before the file is
  // opened for the runtime, the signature is checked against the trust
  // material and every file of the signed folder against its digests
  // (A1-A7; `threads` hash at once). On any broken rule the map is not
  // opened: the error names the file, the rule (and a shard's range).
  // `report`, when not null, says what ran.
  static absl::StatusOr<std::unique_ptr<ContainerDataMap>> OpenFile(
      const std::string& path, Access access, const SignatureOptions& signature, size_t threads = 4,
      SignatureReport* report = nullptr);
  static absl::StatusOr<std::unique_ptr<ContainerDataMap>> Open(
      std::shared_ptr<const FileSource> source);

  // REQUIRES: `container` came from Container::Open (every rule holds).
  explicit ContainerDataMap(std::shared_ptr<const Container> container);

  const Container& container() const { return *container_; }

  // ---- executorch::runtime::NamedDataMap ----
  ::executorch::runtime::Result<const ::executorch::runtime::TensorLayout> get_tensor_layout(
      std::string_view key) const override;
  ::executorch::runtime::Result<::executorch::runtime::FreeableBuffer> get_data(
      std::string_view key) const override;
  // Copies the key's bytes (see above) into `buffer`. InvalidArgument unless
  // `size` equals that byte count; nothing is written then.
  ::executorch::runtime::Error load_data_into(std::string_view key, void* buffer,
                                              size_t size) const override;
  ::executorch::runtime::Result<uint32_t> get_num_keys() const override;
  // InvalidArgument for index >= get_num_keys(). The pointer lives as long as
  // the container (this map or any buffer it handed out).
  ::executorch::runtime::Result<const char*> get_key(uint32_t index) const override;

  // Bytes load_data_into() copies for `entry`: the layout's nbytes, or the
  // segment size for a key without a layout.
  uint64_t LoadSize(const NamedDataEntry& entry) const;

 private:
  std::shared_ptr<const Container> container_;
};

}  // namespace ptd

#endif  // PTD_EXECUTORCH_CONTAINER_DATA_MAP_H_
