// Digests of loaded memory, for checking that the right bytes reached the
// right place (ptd-load --digest, tests).
#include <string>

#include "absl/strings/str_cat.h"
#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "runtime/internal/checked_math.h"

namespace ptd {
namespace {

// Device memory the host cannot address, read back through CopyToHost: the
// gather reads it in bounded pieces (no View()).
class DeviceMemorySource final : public FileSource {
 public:
  DeviceMemorySource(Device& device, const void* base, uint64_t size)
      : device_(device), base_(static_cast<const uint8_t*>(base)), size_(size),
        name_(absl::StrCat("<", device.name(), " memory>")) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (!internal::RangeInside(offset, dst.size(), size_)) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": read past the end"));
    }
    if (dst.empty()) return absl::OkStatus();
    return device_.CopyToHost(dst.data(), base_ + offset, dst.size());
  }

 private:
  Device& device_;
  const uint8_t* base_;
  uint64_t size_;
  std::string name_;
};

}  // namespace

absl::StatusOr<std::string> DigestLoadedWeight(const LoadedWeights& weights,
                                               const LoadedWeight& weight) {
  const LoadedStorage& s = weights.storage(weight);
  if (s.host_accessible) {
    return DigestView(
        absl::MakeConstSpan(static_cast<const uint8_t*>(s.buffer.data()), s.nbytes),
        weight.view());
  }
  const DeviceMemorySource source(weights.DeviceOf(s), s.buffer.data(), s.nbytes);
  return DigestView(source, 0, s.nbytes, weight.view());
}

absl::StatusOr<std::string> DigestLoadedStorage(const LoadedWeights& weights,
                                                const LoadedStorage& storage) {
  if (storage.host_accessible) {
    return Sha256Hex(
        absl::MakeConstSpan(static_cast<const uint8_t*>(storage.buffer.data()), storage.nbytes));
  }
  const DeviceMemorySource source(weights.DeviceOf(storage), storage.buffer.data(),
                                  storage.nbytes);
  return DigestRange(source, 0, storage.nbytes);
}

}  // namespace ptd
