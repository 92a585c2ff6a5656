// libcufile_sim.so: the cuFile stand-in of the simulator build, for tests
// only (like the rest of tests/cudasim/). The loader loads it as it loads the
// real libcufile (dlopen of PTD_CUFILE_LIBRARY, then dlsym by name), and it
// implements the calls the project makes (runtime/cuda/cufile.cc) with
// cuFile's documented behaviour, as strictly as the library:
//   cuFileDriverOpen           opens the driver (CU_FILE_DRIVER_NOT_INITIALIZED
//                              when told to fail, as without nvidia-fs and
//                              with compatibility mode off);
//   cuFileDriverGetProperties  nvfs version 2.x in P2P mode, 0.0 in
//                              compatibility mode (no nvidia-fs);
//   cuFileHandleRegister       needs the driver open, an OPAQUE_FD
//                              descriptor of an open regular file, and in
//                              P2P mode one opened with O_DIRECT
//                              (CU_FILE_DIO_NOT_SET otherwise);
//   cuFileHandleDeregister     of a registered handle;
//   cuFileRead                 of a registered handle into device memory of
//                              the simulator (cudaPointerGetAttributes: a
//                              host pointer is CU_FILE_CUDA_MEMORY_TYPE_INVALID;
//                              a range past the allocation fails as the
//                              simulator's copy fails: CU_FILE_CUDA_POINTER_
//                              RANGE_ERROR), synchronous: the bytes are in
//                              device memory when it returns (pread, then
//                              the simulator's cudaMemcpy, resolved from the
//                              executable that loaded this library). Short
//                              at the end of the file, -1 with errno for a
//                              failed read.
// Control (read at each call): PTD_CUFILE_SIM_MODE=p2p|compat (default
// p2p), PTD_CUFILE_SIM_FAIL_OPEN=1, PTD_CUFILE_SIM_FAIL_READ=N (the Nth
// cuFileRead since the driver was opened fails with EIO); and
// ptd_cufile_sim_reads(), the reads so far (a test's dlsym).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Error {
  int err;
  int cu_err;
};
struct Descr {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct DrvProps {
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

constexpr int kDriverNotInitialized = 5001;
constexpr int kCudaPointerInvalid = 5012;
constexpr int kCudaMemoryTypeInvalid = 5013;
constexpr int kCudaPointerRangeError = 5014;
constexpr int kInvalidFileType = 5018;
constexpr int kDioNotSet = 5020;
constexpr int kInvalidValue = 5022;
constexpr int kHandleNotRegistered = 5027;

struct Handle {
  int fd;       // The registered descriptor (O_DIRECT in P2P mode).
  int read_fd;  // The same file opened again, for this stand-in's preads.
};

std::mutex g_mu;
bool g_open = false;                                     // Guarded by g_mu.
std::set<Handle*>* g_handles = new std::set<Handle*>();  // Guarded by g_mu.
std::atomic<long> g_reads{0};

bool P2p() {
  const char* m = std::getenv("PTD_CUFILE_SIM_MODE");
  return m == nullptr || std::strcmp(m, "compat") != 0;
}

long EnvLong(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::atol(v);
}

bool Registered(Handle* h) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_handles->count(h) != 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) Error cuFileDriverOpen() {
  if (EnvLong("PTD_CUFILE_SIM_FAIL_OPEN") != 0) return Error{kDriverNotInitialized, 0};
  std::lock_guard<std::mutex> lock(g_mu);
  g_open = true;
  g_reads = 0;
  return Error{0, 0};
}

__attribute__((visibility("default"))) Error cuFileDriverGetProperties(DrvProps* props) {
  if (props == nullptr) return Error{kInvalidValue, 0};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_open) return Error{kDriverNotInitialized, 0};
  }
  *props = DrvProps{};
  if (P2p()) {
    props->nvfs.major_version = 2;
    props->nvfs.minor_version = 26;
  }
  props->nvfs.max_direct_io_size = 16u << 20;
  return Error{0, 0};
}

__attribute__((visibility("default"))) Error cuFileHandleRegister(void** fh, Descr* descr) {
  if (fh == nullptr || descr == nullptr) return Error{kInvalidValue, 0};
  if (descr->type != 1) return Error{kInvalidFileType, 0};
  const int fd = descr->handle.fd;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Error{kInvalidFileType, 0};
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return Error{kInvalidValue, 0};
  if (P2p() && (flags & O_DIRECT) == 0) return Error{kDioNotSet, 0};
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_open) return Error{kDriverNotInitialized, 0};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const int read_fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (read_fd < 0) return Error{kInvalidFileType, 0};
  auto* h = new Handle{fd, read_fd};
  g_handles->insert(h);
  *fh = h;
  return Error{0, 0};
}

__attribute__((visibility("default"))) void cuFileHandleDeregister(void* fh) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto* h = static_cast<Handle*>(fh);
  if (g_handles->erase(h) != 0) {
    ::close(h->read_fd);
    delete h;
  }
}

__attribute__((visibility("default"))) ssize_t cuFileRead(void* fh, void* buf_base, size_t size,
                                                          off_t file_offset, off_t buf_offset) {
  auto* h = static_cast<Handle*>(fh);
  if (!Registered(h)) return -kHandleNotRegistered;
  if (buf_base == nullptr || file_offset < 0 || buf_offset < 0) return -kInvalidValue;
  cudaPointerAttributes attr{};
  if (::cudaPointerGetAttributes(&attr, buf_base) != cudaSuccess) {
    (void)::cudaGetLastError();
    return -kCudaPointerInvalid;
  }
  if (attr.type != cudaMemoryTypeDevice) return -kCudaMemoryTypeInvalid;
  const long n = ++g_reads;
  if (n == EnvLong("PTD_CUFILE_SIM_FAIL_READ")) {
    errno = EIO;
    return -1;
  }
  std::vector<char> bounce(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t r = ::pread(h->read_fd, bounce.data() + got, size - got, file_offset + got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;  // errno says why.
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > 0 && ::cudaMemcpy(static_cast<char*>(buf_base) + buf_offset, bounce.data(), got,
                              cudaMemcpyHostToDevice) != cudaSuccess) {
    (void)::cudaGetLastError();
    return -kCudaPointerRangeError;
  }
  return static_cast<ssize_t>(got);
}

__attribute__((visibility("default"))) long ptd_cufile_sim_reads() { return g_reads.load(); }

}  // extern "C"
