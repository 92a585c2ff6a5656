// OpenDevice: a device by name ("host", "cuda:1"), the factory behind
// `ptd-load --device`, and the hook through which the CUDA library plugs in
// CudaDevice without the core targets depending on CUDA.
//
// Plugging in CUDA: ptd::cuda defines RegisterCudaDevice() as
//   void RegisterCudaDevice() { RegisterDeviceFactory("cuda", &OpenCudaDevice); }
// and a tool linked with ptd::cuda (PTD_HAVE_CUDA defined) calls it once at
// start-up; ptd-load does.
//
// Thread-safety: every function may be called concurrently.
#ifndef PTD_OPEN_DEVICE_H_
#define PTD_OPEN_DEVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ptd/device.h"

namespace ptd {

// Makes the device of kind `kind` with index `index` (cuda:N).
using DeviceFactory =
    std::function<absl::StatusOr<std::shared_ptr<Device>>(int index)>;

// Registers `factory` for `kind` ("cuda"), replacing an earlier one. The CUDA
// library (ptd::cuda) does this in RegisterCudaDevice(); call it once before
// OpenDevice (ptd-load does when built with CUDA). An empty `factory`
// unregisters `kind`. Returns true.
bool RegisterDeviceFactory(std::string kind, DeviceFactory factory);

// Defined by ptd::cuda only (runtime/cuda): registers the "cuda" factory.
// Callers guard the call with PTD_HAVE_CUDA.
void RegisterCudaDevice();

// Opens a device from a spec:
//   "host"              a HostDevice;
//   "cuda" / "cuda:N"   device N (0) through the registered "cuda" factory:
//                       Unavailable "built without CUDA" when none is
//                       registered, or the factory's error (no GPU);
//   "" / "auto"         cuda:0 when a factory is registered and opens it,
//                       else the host.
// InvalidArgument for anything else.
absl::StatusOr<std::shared_ptr<Device>> OpenDevice(std::string_view spec);

}  // namespace ptd

#endif  // PTD_OPEN_DEVICE_H_
