// Kernels compiled ahead of time and launched through the CUDA runtime's
// library API (cudaLibraryLoadData, cudaLibraryGetKernel, cudaLaunchKernel;
// CUDA 12.0 and later): the CUDA 12 build of the GPU bundle, whose host code
// is compiled by the host compiler against the CUDA 12 headers of PyPI's
// wheels, which carry no nvcc. The images (cubins for a few architectures
// and one PTX for the driver to compile on the others) are embedded in the
// binary by the build (cmake/PtdPrebuiltKernels.cmake); each device gets the
// image that runs on it (SelectPrebuiltImage).
#ifndef PTD_CUDA_INTERNAL_PREBUILT_KERNELS_H_
#define PTD_CUDA_INTERNAL_PREBUILT_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ptd::internal {

// One embedded image: native code for sm_<arch> (a cubin), or PTX for
// compute_<arch> and newer.
struct PrebuiltImage {
  uint32_t arch = 0;  // major * 10 + minor.
  bool ptx = false;
  const void* data = nullptr;  // PTX is NUL-terminated.
  size_t size = 0;
};

// The images this binary carries (defined by the build's generated source).
const PrebuiltImage* PrebuiltImages(size_t* count);

// The image that runs on a device of compute capability `cc` (major * 10 +
// minor): the cubin of the same major version with the highest minor not
// above the device's (native code runs on later minors of its major), else
// the PTX when the device is at least its architecture; null when none does.
const PrebuiltImage* SelectPrebuiltImage(const PrebuiltImage* images, size_t count, uint32_t cc);

// "sm_90 cubin", "compute_80 PTX".
std::string PrebuiltImageName(const PrebuiltImage& image);

// Launches entry point `name` of the current device's image on `stream`,
// loading that image once per process. Like a <<<...>>> launch, a failure
// is also the thread's last error (cudaGetLastError()); the error is
// returned as well.
cudaError_t LaunchPrebuiltKernel(const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                                 cudaStream_t stream, void** args);

// What PTD_LAUNCH(kernel, ...) evaluates to in the prebuilt build: calling it
// with the arguments launches. They convert to the parameter types first, so
// that the argument buffer holds each parameter as the kernel reads it.
template <typename... Params>
class PrebuiltLauncher {
 public:
  PrebuiltLauncher(const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream)
      : name_(name), grid_(grid), block_(block), shared_bytes_(shared_bytes), stream_(stream) {}

  void operator()(Params... args) const {
    void* pointers[] = {const_cast<void*>(static_cast<const void*>(&args))...};
    (void)LaunchPrebuiltKernel(name_, grid_, block_, shared_bytes_, stream_, pointers);
  }

 private:
  const char* name_;
  dim3 grid_;
  dim3 block_;
  size_t shared_bytes_;
  cudaStream_t stream_;
};

template <typename... Params>
PrebuiltLauncher<Params...> MakePrebuiltLauncher(void (*)(Params...), const char* name, dim3 grid,
                                                 dim3 block, size_t shared_bytes,
                                                 cudaStream_t stream) {
  return PrebuiltLauncher<Params...>(name, grid, block, shared_bytes, stream);
}

}  // namespace ptd::internal

#endif  // PTD_CUDA_INTERNAL_PREBUILT_KERNELS_H_
