#include "ptd/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

#include "runtime/internal/strings.h"
#include "runtime/io/file_ops.h"

namespace ptd {
namespace internal {

int FileOps::Open(const char* path, int flags, mode_t mode) const {
  return ::open(path, flags, mode);
}
ssize_t FileOps::Write(int fd, const void* buf, size_t n) const { return ::write(fd, buf, n); }
int FileOps::Fsync(int fd) const { return ::fsync(fd); }
int FileOps::Close(int fd) const { return ::close(fd); }
int FileOps::Rename(const char* from, const char* to) const { return ::rename(from, to); }
int FileOps::Unlink(const char* path) const { return ::unlink(path); }

const FileOps& DefaultFileOps() {
  static const FileOps ops;
  return ops;
}

}  // namespace internal

namespace {

// The most one write(2) or pwrite(2) call hands the kernel. On these
// machines (ext4, a VM), copying 1 GiB into the page cache took 0.4 s in
// 128-256 KiB calls and 1.1-3.8 s in 1-4 MiB calls, the same bytes from the
// same buffer (bench/results/checkpoint.md); writers hand over whole
// tensors, so the split is made here, once.
constexpr size_t kWriteChunkBytes = size_t{256} << 10;

// "<path>: <step> failed (<what>): <strerror>", with the code the errno
// calls for. `step` is the system call: open, write, fsync, close, rename.
absl::Status Errno(int err, std::string_view step, std::string_view what, const std::string& path) {
  std::string msg = absl::StrCat(path, ": ", internal::Sv(step), " failed (", internal::Sv(what),
                                 "): ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(msg);
  }
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A name part no other writer (thread or process) picks at the same time.
uint64_t TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = std::random_device{}();
  return seed ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
}

// Removes the temporary unless released.
class TempFile {
 public:
  TempFile(const internal::FileOps& ops, int fd, std::string path)
      : ops_(ops), fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ops_.Close(fd_);
    if (!path_.empty()) ops_.Unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  absl::Status Close() {
    const int fd = fd_;
    fd_ = -1;
    if (ops_.Close(fd) != 0) return Errno(errno, "close", "closing the temporary file", path_);
    return absl::OkStatus();
  }
  void Release() { path_.clear(); }

 private:
  const internal::FileOps& ops_;
  int fd_;
  std::string path_;
};

}  // namespace

namespace internal {

// The positional form behind both; file_ops.h declares only the appending one.
absl::Status WriteFileAtomicallyAt(
    const FileOps& ops, const std::string& path,
    const std::function<absl::Status(const WriteFn&, const WriteAtFn&)>& produce,
    const std::function<absl::Status(const std::string&)>& check);

absl::Status WriteFileAtomically(const FileOps& ops, const std::string& path,
                                 const std::function<absl::Status(const WriteFn&)>& produce) {
  return WriteFileAtomicallyAt(
      ops, path, [&](const WriteFn& write, const WriteAtFn&) { return produce(write); }, nullptr);
}

absl::Status WriteFileAtomicallyAt(
    const FileOps& ops, const std::string& path,
    const std::function<absl::Status(const WriteFn&, const WriteAtFn&)>& produce,
    const std::function<absl::Status(const std::string&)>& check) {
  // The kernel applies the umask (and any default ACL) to the 0666 mode, as
  // for any new file; the process umask is neither read nor changed.
  std::string tmp_path;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp_path = absl::StrCat(path, ".tmp.", ::getpid(), ".", TempSuffix());
    fd = ops.Open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 99)) {
      return Errno(errno, "open", "creating the temporary file", tmp_path);
    }
  }
  TempFile tmp(ops, fd, tmp_path);

  const WriteFn write = [&](absl::Span<const uint8_t> bytes) -> absl::Status {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ops.Write(tmp.fd(), bytes.data() + done, std::min(bytes.size() - done, kWriteChunkBytes));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;  // Before the message's allocations.
        return Errno(err, "write",
                     absl::StrCat("writing ", bytes.size() - done, " bytes at offset ", done),
                     tmp.path());
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  // Positional writes go around FileOps: the fault-injection seam covers
  // the appending path that every writer uses.
  const WriteAtFn write_at = [&](uint64_t offset, absl::Span<const uint8_t> bytes) -> absl::Status {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pwrite(tmp.fd(), bytes.data() + done, std::min(bytes.size() - done, kWriteChunkBytes),
                   static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        return Errno(
            err, "pwrite",
            absl::StrCat("writing ", bytes.size() - done, " bytes at offset ", offset + done),
            tmp.path());
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = produce(write, write_at); !s.ok()) return s;
  if (ops.Fsync(tmp.fd()) != 0) {
    return Errno(errno, "fsync", "flushing the temporary file", tmp.path());
  }
  if (absl::Status s = tmp.Close(); !s.ok()) return s;
  if (check) {
    if (absl::Status s = check(tmp.path()); !s.ok()) return s;
  }
  if (ops.Rename(tmp.path().c_str(), path.c_str()) != 0) {
    const int err = errno;
    return Errno(err, "rename", absl::StrCat("replacing the target with ", tmp.path()), path);
  }
  tmp.Release();
  // Make the rename durable. A failure here leaves a complete file in place.
  const std::string dir = DirName(path);
  const int dfd = ops.Open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dfd >= 0) {
    ops.Fsync(dfd);
    ops.Close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<absl::Status(const WriteFn&)>& produce) {
  return internal::WriteFileAtomically(internal::DefaultFileOps(), path, produce);
}

absl::Status WriteFileAtomicallyAt(
    const std::string& path,
    const std::function<absl::Status(const WriteFn&, const WriteAtFn&)>& produce,
    const std::function<absl::Status(const std::string&)>& check) {
  return internal::WriteFileAtomicallyAt(internal::DefaultFileOps(), path, produce, check);
}

absl::Status WriteFileAtomically(const std::string& path, absl::Span<const uint8_t> bytes) {
  return WriteFileAtomically(path, [&](const WriteFn& write) { return write(bytes); });
}

}  // namespace ptd
