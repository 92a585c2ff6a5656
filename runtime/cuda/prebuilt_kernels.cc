#include "runtime/cuda/internal/prebuilt_kernels.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ptd::internal {

const PrebuiltImage* SelectPrebuiltImage(const PrebuiltImage* images, size_t count, uint32_t cc) {
  const PrebuiltImage* best = nullptr;
  for (size_t i = 0; i < count; ++i) {
    const PrebuiltImage& image = images[i];
    if (image.ptx || image.arch / 10 != cc / 10 || image.arch > cc) continue;
    if (best == nullptr || image.arch > best->arch) best = &image;
  }
  if (best != nullptr) return best;
  for (size_t i = 0; i < count; ++i) {
    const PrebuiltImage& image = images[i];
    if (image.ptx && image.arch <= cc && (best == nullptr || image.arch > best->arch)) {
      best = &image;
    }
  }
  return best;
}

std::string PrebuiltImageName(const PrebuiltImage& image) {
  return image.ptx ? absl::StrCat("compute_", image.arch, " PTX")
                   : absl::StrCat("sm_", image.arch, " cubin");
}

namespace {

// The loaded images and their kernels, for the life of the process: a
// library is context-independent (the driver loads it into each device's
// context when first used there), and unloading one at exit could race a
// stream still running. Guarded by one mutex: launches are per materialized
// weight, not per element.
class KernelLibraries {
 public:
  cudaError_t Find(const PrebuiltImage& image, const char* name, cudaKernel_t* kernel) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : kernels_) {
      if (e.image == &image && std::strcmp(e.name, name) == 0) {
        *kernel = e.kernel;
        return cudaSuccess;
      }
    }
    cudaLibrary_t library = nullptr;
    for (const auto& [loaded_image, loaded] : libraries_) {
      if (loaded_image == &image) library = loaded;
    }
    if (library == nullptr) {
      const cudaError_t error =
          cudaLibraryLoadData(&library, image.data, nullptr, nullptr, 0, nullptr, nullptr, 0);
      if (error != cudaSuccess) return error;
      libraries_.emplace_back(&image, library);
    }
    const cudaError_t error = cudaLibraryGetKernel(kernel, library, name);
    if (error != cudaSuccess) return error;
    kernels_.push_back(Entry{&image, name, *kernel});
    return cudaSuccess;
  }

 private:
  struct Entry {
    const PrebuiltImage* image;
    const char* name;  // A string literal (PTD_LAUNCH's #kernel).
    cudaKernel_t kernel;
  };
  std::mutex mu_;
  std::vector<std::pair<const PrebuiltImage*, cudaLibrary_t>> libraries_;
  std::vector<Entry> kernels_;
};

KernelLibraries& Libraries() {
  static KernelLibraries* const libraries = new KernelLibraries();  // Never destroyed.
  return *libraries;
}

}  // namespace

cudaError_t LaunchPrebuiltKernel(const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                                 cudaStream_t stream, void** args) {
  int device = 0, major = 0, minor = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (error != cudaSuccess) return error;
  size_t count = 0;
  const PrebuiltImage* images = PrebuiltImages(&count);
  const PrebuiltImage* image =
      SelectPrebuiltImage(images, count, static_cast<uint32_t>(major * 10 + minor));
  // A device older than every image (before sm_80): the PTX all the same,
  // so that the driver's own error (cudaErrorNoKernelImageForDevice) is the
  // thread's last error, as after a <<<...>>> launch.
  for (size_t i = 0; image == nullptr && i < count; ++i) {
    if (images[i].ptx) image = &images[i];
  }
  if (image == nullptr) return cudaErrorNoKernelImageForDevice;  // The build embeds a PTX.
  cudaKernel_t kernel = nullptr;
  error = Libraries().Find(*image, name, &kernel);
  if (error != cudaSuccess) return error;
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, shared_bytes,
                          stream);
}

}  // namespace ptd::internal
