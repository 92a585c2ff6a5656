// cuFile (GPUDirect Storage), loaded at run time: CudaDevice::OpenFileReader.
//
// libcufile is never linked: the build, the package and the GPU bundle do
// not need it. The first reader loads it with dlopen (PTD_CUFILE_LIBRARY, a
// path, else "libcufile.so.0": the nvidia-cufile wheel's, or the CUDA
// toolkit's GDS package, on the loader's search path), looks its entry
// points up into a table, and opens its driver, once per process and
// library; a failure is remembered and said again, never retried.
#ifndef PTD_RUNTIME_CUDA_INTERNAL_CUFILE_H_
#define PTD_RUNTIME_CUDA_INTERNAL_CUFILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

#include "ptd/device.h"

namespace ptd::internal {

// A reader from the file open as `fd` (opened again with O_DIRECT, which
// cuFile's GPUDirect mode needs) into device `device`'s memory. Errors say
// why there is none: FailedPrecondition when the library cannot be loaded
// or its driver opened, or O_DIRECT is refused; Unavailable when cuFile
// refuses the file.
absl::StatusOr<std::unique_ptr<DeviceFileReader>> OpenCuFileReader(int device, int fd,
                                                                   const std::string& name);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_CUDA_INTERNAL_CUFILE_H_
