// DirectFile: reads of a file past the page cache (O_DIRECT), several
// requests in flight, for the loader's direct engine (read_engine.h).
//
// O_DIRECT moves bytes from the disk into the caller's buffer without the
// kernel's copy into its page cache and out again, and leaves no copy of the
// file behind. It asks for alignment: the file offset, the buffer address
// and the length are multiples of kAlignment (4 KiB covers every logical
// block size in use). A read is split into up to kQueueDepth requests that
// are in flight at once through io_uring (liburing) where the kernel allows
// it; otherwise one pread(2) per call, the loader's reader threads keeping
// several in flight.
//
// Thread-safety: Read may be called concurrently (each thread queues on its
// own ring).
#ifndef PTD_RUNTIME_IO_DIRECT_FILE_H_
#define PTD_RUNTIME_IO_DIRECT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ptd::internal {

class DirectFile {
 public:
  static constexpr uint64_t kAlignment = 4096;
  static constexpr size_t kQueueDepth = 4;

  // The file open as `fd` (a regular file) opened again with O_DIRECT (its
  // own descriptor, so that the caller's reads stay buffered). Errors say
  // why there is no direct engine, naming `name`: FailedPrecondition when
  // the filesystem refuses O_DIRECT (EINVAL) or keeps its files in memory
  // (tmpfs, ramfs: a direct read would copy from memory as pread does),
  // Unavailable for another failure.
  static absl::StatusOr<std::unique_ptr<DirectFile>> Open(int fd, const std::string& name);
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  // Reads [offset, offset + dst.size()) into dst. REQUIRES: offset,
  // dst.data() and dst.size() are multiples of kAlignment. Returns the
  // bytes read: dst.size(), or fewer when the file ends first. Errors carry
  // the failing errno's text (EINVAL: the filesystem refused this request).
  absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> dst) const;

  // How reads are queued: "io_uring", or "threads" where the kernel refuses
  // io_uring (it was never set up, or a container's seccomp blocks it).
  static std::string_view Queue();

 private:
  DirectFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  // pread(2) until dst is full or the file ends.
  absl::StatusOr<size_t> ReadSync(uint64_t offset, absl::Span<uint8_t> dst) const;

  int fd_;
  std::string name_;
};

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_IO_DIRECT_FILE_H_
