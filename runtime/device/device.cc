#include "ptd/device.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace ptd {

absl::StatusOr<std::vector<DeviceBuffer>> Device::AllocateMany(absl::Span<const size_t> sizes) {
  std::vector<DeviceBuffer> out;
  out.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto b = Allocate(sizes[i]);
    if (!b.ok()) {
      absl::Status s(b.status().code(), absl::StrCat("buffer ", i, " of ", sizes.size(), " (",
                                                     sizes[i], " bytes): ", b.status().message()));
      s.SetPayload(kAllocateManyIndexPayload, absl::Cord(std::to_string(i)));
      return s;  // `out` goes: nothing stays allocated.
    }
    out.push_back(*std::move(b));
  }
  return out;
}

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::string_view ResidencyName(Residency r) {
  switch (r) {
    case Residency::kDevice:
      return "device";
    case Residency::kMappedHost:
      return "mapped_host";
    case Residency::kHost:
      return "host";
  }
  return "unknown";
}

absl::StatusOr<std::vector<DeviceBuffer>> Device::AllocateMappedMany(
    absl::Span<const size_t> /*sizes*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " has no host memory mapped for its kernels"));
}

absl::StatusOr<DeviceMemoryInfo> Device::MemoryInfo() {
  return absl::UnimplementedError(absl::StrCat(name(), " cannot report its free memory"));
}

absl::Status Device::PrepareWrite(void* /*p*/, size_t /*n*/) { return absl::OkStatus(); }

void Device::PrepareAllocation(uint64_t /*bytes*/) {}

absl::StatusOr<std::vector<CopyTicket>> Device::ScatterToDeviceAsync(
    void* /*scratch*/, const void* /*src*/, size_t /*nbytes*/, size_t /*table_offset*/,
    size_t /*count*/, void* /*dst_base*/) {
  return absl::UnimplementedError(absl::StrCat(name(), " has no scatter copy"));
}

absl::StatusOr<std::unique_ptr<DeviceFileReader>> Device::OpenFileReader(int /*fd*/,
                                                                         const std::string& name) {
  return absl::UnimplementedError(absl::StrCat(
      name, ": ", this->name(), " has no path from files into its memory (GPUDirect Storage)"));
}

absl::StatusOr<std::vector<CopyTicket>> Device::CopyManyToDeviceAsync(
    absl::Span<const CopyRequest> requests) {
  std::vector<CopyTicket> tickets;
  tickets.reserve(requests.size());
  for (const CopyRequest& r : requests) {
    auto t = CopyToDeviceAsync(r.dst, r.src, r.nbytes);
    if (!t.ok()) {
      // Nothing of the batch stays in flight: the caller may reuse sources.
      for (const CopyTicket& done : tickets) (void)Wait(done);
      return t.status();
    }
    tickets.push_back(*t);
  }
  return tickets;
}

}  // namespace ptd
