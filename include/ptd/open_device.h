// OpenDevice: a device by name ("host", "cuda:1"; "cpu" is an alias of
// "host"), for a device chosen at run time by a string (`ptd-load --device`,
// the Python module's device=), and the hook through which the CUDA library
// plugs in CudaDevice without the core targets depending on CUDA.
//
// Code that knows it wants a GPU opens it with CudaDevice::Open(N)
// (ptd/cuda_device.h): that is the one way; OpenDevice("cuda:N") calls it
// through the registered factory.
//
// Plugging in CUDA: linking ptd::cuda defines PTD_HAVE_CUDA (a usage
// requirement of the target), which declares RegisterCudaDevice() below;
// call it once at start-up. Without ptd::cuda the call does not compile.
//
// Example:
//   #ifdef PTD_HAVE_CUDA
//     ptd::RegisterCudaDevice();
//   #endif
//   absl::StatusOr<std::shared_ptr<ptd::Device>> device = ptd::OpenDevice(flag);
//   // "cuda:0" without ptd::cuda: Unavailable "built without CUDA".
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
using DeviceFactory = std::function<absl::StatusOr<std::shared_ptr<Device>>(int index)>;

// Registers `factory` for `kind` ("cuda"), replacing an earlier one. The CUDA
// library (ptd::cuda) does this in RegisterCudaDevice(). An empty `factory`
// unregisters `kind`. Returns true.
bool RegisterDeviceFactory(std::string kind, DeviceFactory factory);

#ifdef PTD_HAVE_CUDA
// Defined by ptd::cuda (runtime/cuda), and declared only where it is linked
// (PTD_HAVE_CUDA): registers the "cuda" factory, CudaDevice::Open(N). Call it
// once before OpenDevice (ptd-load and the Python module do).
void RegisterCudaDevice();
#endif

// Opens a device from a spec (the one device vocabulary of ptd-load --device
// and the Python module, whose outputs name devices "host" and "cuda:N"):
//   "host"              a HostDevice;
//   "cpu"               an alias of "host" (PyTorch's word), the same device;
//   "cuda" / "cuda:N"   device N (0) through the registered "cuda" factory:
//                       Unavailable "built without CUDA" when none is
//                       registered, or the factory's error (no GPU);
//   "" / "auto"         cuda:0 when a factory is registered and opens it,
//                       else the host.
// InvalidArgument for anything else.
absl::StatusOr<std::shared_ptr<Device>> OpenDevice(std::string_view spec);

}  // namespace ptd

#endif  // PTD_OPEN_DEVICE_H_
