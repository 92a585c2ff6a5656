#include "ptd/executorch/container_data_map.h"

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/span.h>
#include <executorch/runtime/platform/log.h>

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/status_macros.h"

namespace ptd {
namespace {

using ::executorch::runtime::Error;
using ::executorch::runtime::FreeableBuffer;
using ::executorch::runtime::Result;
using ::executorch::runtime::Span;
using EtTensorLayout = ::executorch::runtime::TensorLayout;

Error ToEtError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return Error::NotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return Error::InvalidArgument;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kPermissionDenied:
      return Error::AccessFailed;
    default:
      return Error::InvalidExternalData;
  }
}

// What a FreeableBuffer from get_data() owns until it is freed: a reference
// to the container (for a view into its mapping) or the copied bytes.
struct Holder {
  std::shared_ptr<const Container> container;
  Bytes bytes;
};

void FreeHolder(void* context, void* /*data*/, size_t /*size*/) {
  delete static_cast<Holder*>(context);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContainerDataMap>> ContainerDataMap::OpenFile(
    const std::string& path, Access access) {
  PTD_ASSIGN_OR_RETURN(std::unique_ptr<FileSource> source,
                       access == Access::kMmap ? OpenMmapFile(path) : OpenPreadFile(path));
  return Open(std::move(source));
}

absl::StatusOr<std::unique_ptr<ContainerDataMap>> ContainerDataMap::OpenFile(
    const std::string& path, Access access, const SignatureOptions& signature, size_t threads,
    SignatureReport* report) {
  if (signature.enabled()) {
    const std::string paths[] = {path};
    PTD_RETURN_IF_ERROR(VerifySignedModel(signature, paths, threads, report));
  }
  return OpenFile(path, access);
}

absl::StatusOr<std::unique_ptr<ContainerDataMap>> ContainerDataMap::Open(
    std::shared_ptr<const FileSource> source) {
  PTD_ASSIGN_OR_RETURN(std::unique_ptr<Container> container, Container::Open(std::move(source)));
  return std::make_unique<ContainerDataMap>(std::shared_ptr<const Container>(std::move(container)));
}

ContainerDataMap::ContainerDataMap(std::shared_ptr<const Container> container)
    : container_(std::move(container)) {}

uint64_t ContainerDataMap::LoadSize(const NamedDataEntry& entry) const {
  const uint64_t segment_size = container_->SegmentSize(entry).value_or(0);
  if (entry.layout == nullptr) return segment_size;
  // C8 holds: the product neither overflows nor exceeds the segment.
  uint64_t n = ElementSize(entry.layout->scalar_type).value_or(0);
  for (int32_t d : entry.layout->sizes) n *= static_cast<uint64_t>(d);
  return n;
}

Result<const EtTensorLayout> ContainerDataMap::get_tensor_layout(std::string_view key) const {
  const NamedDataEntry* e = container_->Find(key);
  if (e == nullptr || e->layout == nullptr) return Error::NotFound;
  // C8 holds, so the one layout ExecuTorch's TensorLayout::create refuses is a
  // zero-byte one whose sizes before the 0 multiply past 64 bits: create
  // checks each partial product, where C8 (and PyTorch's numel) gives 0.
  uint64_t product = 1;
  for (int32_t d : e->layout->sizes) {
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(d), &product)) {
      ET_LOG(Error,
             "get_tensor_layout: key '%.*s': ExecuTorch's TensorLayout refuses "
             "its %zu sizes (their running product overflows 64 bits before "
             "a size 0)",
             static_cast<int>(key.size()), key.data(), e->layout->sizes.size());
      return Error::InvalidArgument;
    }
  }
  // The spans point into the container's decoded entries, which live as long
  // as the container.
  return EtTensorLayout::create(
      Span<const int32_t>(e->layout->sizes.data(), e->layout->sizes.size()),
      Span<const uint8_t>(e->layout->dim_order.data(), e->layout->dim_order.size()),
      static_cast<::executorch::aten::ScalarType>(e->layout->scalar_type));
}

Result<FreeableBuffer> ContainerDataMap::get_data(std::string_view key) const {
  const NamedDataEntry* e = container_->Find(key);
  if (e == nullptr) return Error::NotFound;
  absl::StatusOr<Bytes> bytes = container_->SegmentData(e->segment_index);
  if (!bytes.ok()) {
    ET_LOG(Error, "%s", std::string(bytes.status().message()).c_str());
    return ToEtError(bytes.status());
  }
  if (bytes->size() == 0) return FreeableBuffer();
  auto* holder = new Holder;
  if (bytes->borrowed()) {
    holder->container = container_;  // Keeps the mapping alive.
  }
  holder->bytes = std::move(*bytes);
  return FreeableBuffer(holder->bytes.data(), holder->bytes.size(), FreeHolder, holder);
}

Error ContainerDataMap::load_data_into(std::string_view key, void* buffer, size_t size) const {
  const NamedDataEntry* e = container_->Find(key);
  if (e == nullptr) return Error::NotFound;
  const uint64_t n = LoadSize(*e);
  if (size != n) {
    ET_LOG(Error, "load_data_into: key '%.*s' holds %llu bytes, asked for %zu",
           static_cast<int>(key.size()), key.data(), static_cast<unsigned long long>(n), size);
    return Error::InvalidArgument;
  }
  if (n == 0) return Error::Ok;
  if (buffer == nullptr) return Error::InvalidArgument;
  const absl::Status s =
      container_->source().ReadAt(container_->SegmentFileOffset(e->segment_index),
                                  absl::MakeSpan(static_cast<uint8_t*>(buffer), n));
  if (!s.ok()) {
    ET_LOG(Error, "%s", std::string(s.message()).c_str());
    return ToEtError(s);
  }
  return Error::Ok;
}

Result<uint32_t> ContainerDataMap::get_num_keys() const {
  return static_cast<uint32_t>(container_->named_data().size());
}

Result<const char*> ContainerDataMap::get_key(uint32_t index) const {
  const auto& entries = container_->named_data();
  if (index >= entries.size()) return Error::InvalidArgument;
  // The FlatBuffers verifier checked the NUL after each string.
  return entries[index].key.data();
}

}  // namespace ptd
