#include "runtime/cuda/internal/cufile.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ptd::internal {
namespace {

// The slice of cuFile's C ABI (cufile.h, cuFile 1.x) that this file calls,
// declared here so that nothing needs cufile.h to build.
namespace abi {
struct Error {
  int err;     // CUfileOpError: 0 is CU_FILE_SUCCESS, failures from 5000.
  int cu_err;  // CUresult, when err is CU_FILE_CUDA_DRIVER_ERROR (5011).
};
constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
struct Descr {                          // CUfileDescr_t
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct DrvProps {  // CUfileDrvProps_t
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    size_t poll_thresh_size;
    size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
};
}  // namespace abi

// The entry points, looked up by name.
struct CuFileApi {
  abi::Error (*driver_open)();
  abi::Error (*driver_get_properties)(abi::DrvProps*);
  abi::Error (*handle_register)(void**, abi::Descr*);
  void (*handle_deregister)(void*);
  ssize_t (*read)(void*, void*, size_t, off_t, off_t);
};

std::string ErrorText(abi::Error e) {
  const char* what = e.err == 5001   ? " (the nvidia-fs driver is not loaded, and compatibility "
                                       "mode is off in cufile.json)"
                     : e.err == 5011 ? " (a CUDA driver error)"
                     : e.err == 5025 ? " (driver or file access denied)"
                     : e.err == 5029 ? " (GPU device not found)"
                                     : "";
  return absl::StrCat("cuFile error ", e.err, what,
                      e.cu_err != 0 ? absl::StrCat(", CUresult ", e.cu_err) : std::string());
}

// Loads `path` and opens its driver; the result stays for the process.
absl::StatusOr<const CuFileApi*> Load(const std::string& path) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, absl::StatusOr<const CuFileApi*>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded->find(path); it != loaded->end()) return it->second;
  const auto fail = [&](std::string why) -> absl::StatusOr<const CuFileApi*> {
    absl::Status st = absl::FailedPreconditionError(std::move(why));
    loaded->emplace(path, st);
    return st;
  };
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return fail(absl::StrCat("cannot load cuFile (", path, "): ", err != nullptr ? err : "?",
                             "; install the nvidia-cufile wheel or the GDS package, or name the "
                             "library in PTD_CUFILE_LIBRARY"));
  }
  auto api = std::make_unique<CuFileApi>();
  const auto sym = [&](const char* name) { return ::dlsym(lib, name); };
  api->driver_open = reinterpret_cast<decltype(api->driver_open)>(sym("cuFileDriverOpen"));
  api->driver_get_properties =
      reinterpret_cast<decltype(api->driver_get_properties)>(sym("cuFileDriverGetProperties"));
  api->handle_register =
      reinterpret_cast<decltype(api->handle_register)>(sym("cuFileHandleRegister"));
  api->handle_deregister =
      reinterpret_cast<decltype(api->handle_deregister)>(sym("cuFileHandleDeregister"));
  api->read = reinterpret_cast<decltype(api->read)>(sym("cuFileRead"));
  if (!api->driver_open || !api->driver_get_properties || !api->handle_register ||
      !api->handle_deregister || !api->read) {
    return fail(absl::StrCat(path,
                             " lacks cuFile's entry points (cuFileDriverOpen, "
                             "cuFileDriverGetProperties, cuFileHandleRegister, "
                             "cuFileHandleDeregister, cuFileRead)"));
  }
  // The library is kept loaded for the process: its driver stays open, as
  // cuFile's own users leave it until exit.
  if (const abi::Error e = api->driver_open(); e.err != 0) {
    return fail(absl::StrCat("cuFileDriverOpen failed: ", ErrorText(e)));
  }
  const CuFileApi* out = api.release();
  loaded->emplace(path, out);
  return out;
}

class CuFileReader final : public DeviceFileReader {
 public:
  CuFileReader(const CuFileApi* api, int device, int fd, void* handle, std::string name,
               std::string mode)
      : api_(api),
        device_(device),
        fd_(fd),
        handle_(handle),
        name_(std::move(name)),
        mode_(std::move(mode)) {}
  ~CuFileReader() override {
    api_->handle_deregister(handle_);
    ::close(fd_);
  }
  std::string_view mode() const override { return mode_; }

  absl::StatusOr<size_t> Read(void* dst, size_t n, uint64_t file_offset) override {
    // cuFile reads into the current device's context.
    if (const cudaError_t e = ::cudaSetDevice(device_); e != cudaSuccess) {
      return absl::UnavailableError(
          absl::StrCat(name_, ": cudaSetDevice(", device_, "): ", ::cudaGetErrorString(e)));
    }
    size_t done = 0;
    while (done < n) {
      errno = 0;
      const ssize_t got = api_->read(handle_, dst, n - done, static_cast<off_t>(file_offset + done),
                                     static_cast<off_t>(done));
      if (got == 0) break;  // The end of the file.
      if (got < 0) {
        if (got == -1 && errno == EINTR) continue;
        const std::string why = got == -1
                                    ? absl::StrCat("errno ", errno, " (", std::strerror(errno), ")")
                                    : ErrorText(abi::Error{static_cast<int>(-got), 0});
        return absl::UnavailableError(absl::StrCat(name_, ": cuFileRead of ", n - done,
                                                   " bytes at offset ", file_offset + done,
                                                   " failed: ", why));
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  const CuFileApi* api_;
  int device_;
  int fd_;
  void* handle_;
  std::string name_;
  std::string mode_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceFileReader>> OpenCuFileReader(int device, int fd,
                                                                   const std::string& name) {
  const char* env = std::getenv("PTD_CUFILE_LIBRARY");
  const std::string path = env != nullptr && *env != '\0' ? env : "libcufile.so.0";
  auto api = Load(path);
  if (!api.ok()) return api.status();
  // "p2p" or "compat", from the driver's properties: an nvidia-fs version
  // of 0.0 means the kernel driver is not loaded, and cuFile reads through
  // its compatibility mode (host bounce buffers).
  abi::DrvProps props{};
  if (const abi::Error e = (*api)->driver_get_properties(&props); e.err != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuFileDriverGetProperties failed: ", ErrorText(e)));
  }
  std::string mode =
      props.nvfs.major_version == 0 && props.nvfs.minor_version == 0 ? "compat" : "p2p";
  // cuFile's GPUDirect mode reads a file opened with O_DIRECT; the same
  // open file, opened again.
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  const int direct = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (direct < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": cannot open with O_DIRECT for cuFile: ", std::strerror(errno)));
  }
  abi::Descr descr{};
  descr.type = abi::kHandleTypeOpaqueFd;
  descr.handle.fd = direct;
  void* handle = nullptr;
  if (const abi::Error e = (*api)->handle_register(&handle, &descr); e.err != 0) {
    ::close(direct);
    return absl::UnavailableError(
        absl::StrCat(name, ": cuFileHandleRegister failed: ", ErrorText(e)));
  }
  return std::unique_ptr<DeviceFileReader>(
      new CuFileReader(*api, device, direct, handle, name, std::move(mode)));
}

}  // namespace ptd::internal
