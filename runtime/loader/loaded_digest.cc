// Digests of loaded memory, for checking that the right bytes reached the
// right place (ptd-load --digest, tests).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "ptd/view_geometry.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"

namespace ptd {
namespace {

// Device memory the host cannot address, read back through CopyToHost: the
// gather reads it in bounded pieces (no View()).
class DeviceMemorySource final : public FileSource {
 public:
  DeviceMemorySource(Device& device, const void* base, uint64_t size)
      : device_(device),
        base_(static_cast<const uint8_t*>(base)),
        size_(size),
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

// A view of device memory whose byte range is at most this is read back
// whole, in CopyToHost calls of kGatherWindowBytes, and gathered on the
// host: a transposed matrix then costs its bytes / 1 MiB copies, not one
// per element. A larger range is gathered through DeviceMemorySource's
// bounded window (one read per 4 KiB block it touches).
constexpr uint64_t kReadBackSpanLimit = uint64_t{512} << 20;

}  // namespace

absl::StatusOr<std::string> DigestLoadedWeight(const LoadedWeights& weights,
                                               const LoadedWeight& weight) {
  const LoadedStorage& s = weights.storage(weight);
  if (s.host_accessible) {
    return DigestView(absl::MakeConstSpan(static_cast<const uint8_t*>(s.buffer.data()), s.nbytes),
                      weight.view());
  }
  const DeviceMemorySource source(weights.DeviceOf(s), s.buffer.data(), s.nbytes);
  const ViewSpec view = weight.view();
  const GeometryResult g = ComputeExtent(view);
  if (!g.ok() || g.extent.empty() || g.extent.required_nbytes > s.nbytes ||
      g.extent.required_nbytes - g.extent.first_byte > kReadBackSpanLimit) {
    return DigestView(source, 0, s.nbytes, view);  // Its errors, or the window.
  }
  // The view's byte range [first_byte, required_nbytes), then the same view
  // relative to it (strides are never negative: first_byte is its lowest).
  const uint64_t span = g.extent.required_nbytes - g.extent.first_byte;
  std::vector<uint8_t> host(span);
  for (uint64_t done = 0; done < span;) {
    const uint64_t n = std::min<uint64_t>(kGatherWindowBytes, span - done);
    PTD_RETURN_IF_ERROR(
        source.ReadAt(g.extent.first_byte + done, absl::MakeSpan(host.data() + done, n)));
    done += n;
  }
  ViewSpec shifted = view;
  shifted.storage_offset = 0;
  return DigestView(absl::MakeConstSpan(host), shifted);
}

absl::StatusOr<std::string> DigestLoadedStorage(const LoadedWeights& weights,
                                                const LoadedStorage& storage) {
  if (storage.host_accessible) {
    return Sha256Hex(
        absl::MakeConstSpan(static_cast<const uint8_t*>(storage.buffer.data()), storage.nbytes));
  }
  const DeviceMemorySource source(weights.DeviceOf(storage), storage.buffer.data(), storage.nbytes);
  return DigestRange(source, 0, storage.nbytes);
}

}  // namespace ptd
