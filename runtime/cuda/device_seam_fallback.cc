// Stand-in for the definition of Device::AllocateMany's default, which
// belongs to ptd::device (runtime/device, the host device's target). Built
// into ptd::cuda only while that target does not exist, so ptd::cuda links
// on its own; runtime/cuda/CMakeLists.txt links ptd::device instead once it
// does.
#include "ptd/device.h"
#include "ptd/status_macros.h"

namespace ptd {

absl::StatusOr<std::vector<DeviceBuffer>> Device::AllocateMany(absl::Span<const size_t> sizes) {
  std::vector<DeviceBuffer> buffers;
  buffers.reserve(sizes.size());
  for (size_t nbytes : sizes) {
    PTD_ASSIGN_OR_RETURN(DeviceBuffer buffer, Allocate(nbytes));
    buffers.push_back(std::move(buffer));
  }
  return buffers;
}

}  // namespace ptd
