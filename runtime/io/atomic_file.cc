#include "ptd/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

absl::Status Errno(std::string_view what, const std::string& path) {
  const int err = errno;
  std::string msg = absl::StrCat(path, ": ", internal::Sv(what), ": ", std::strerror(err));
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
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  absl::Status Close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Errno("cannot close", path_);
    return absl::OkStatus();
  }
  void Release() { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

absl::Status WriteFileAtomically(
    const std::string& path,
    const std::function<absl::Status(const WriteFn&)>& produce) {
  // The kernel applies the umask (and any default ACL) to the 0666 mode, as
  // for any new file; the process umask is neither read nor changed.
  std::string tmp_path;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp_path = absl::StrCat(path, ".tmp.", ::getpid(), ".", TempSuffix());
    fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 99)) {
      return Errno("cannot create a temporary file", tmp_path);
    }
  }
  TempFile tmp(fd, tmp_path);

  const WriteFn write = [&](absl::Span<const uint8_t> bytes) -> absl::Status {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(tmp.fd(), bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("write failed", tmp.path());
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = produce(write); !s.ok()) return s;
  if (::fsync(tmp.fd()) != 0) return Errno("fsync failed", tmp.path());
  if (absl::Status s = tmp.Close(); !s.ok()) return s;
  if (::rename(tmp.path().c_str(), path.c_str()) != 0) {
    return Errno("cannot rename the temporary file over", path);
  }
  tmp.Release();
  // Make the rename durable. A failure here leaves a complete file in place.
  const std::string dir = DirName(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const uint8_t> bytes) {
  return WriteFileAtomically(
      path, [&](const WriteFn& write) { return write(bytes); });
}

}  // namespace ptd
