#include "runtime/io/direct_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

#if PTD_HAVE_LIBURING
#include <liburing.h>
#endif

namespace ptd::internal {
namespace {

absl::Status ErrnoError(int err, const std::string& name, const std::string& what) {
  const std::string msg = absl::StrCat(name, ": ", what, ": ", std::strerror(err));
  return err == EINVAL ? absl::FailedPreconditionError(msg) : absl::UnavailableError(msg);
}

#if PTD_HAVE_LIBURING
// Whether io_uring works here; cleared at the first ring that cannot be set
// up (ENOSYS, or EPERM under a seccomp filter or io_uring_disabled).
std::atomic<bool> g_uring{true};

// One ring per thread, set up at its first direct read, torn down when the
// thread ends.
class ThreadRing {
 public:
  ThreadRing() {
    if (!g_uring.load(std::memory_order_relaxed)) return;
    if (::io_uring_queue_init(DirectFile::kQueueDepth, &ring_, 0) == 0) {
      ok_ = true;
    } else {
      g_uring.store(false, std::memory_order_relaxed);
    }
  }
  ~ThreadRing() {
    if (ok_) ::io_uring_queue_exit(&ring_);
  }
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;
  io_uring* get() { return ok_ ? &ring_ : nullptr; }

 private:
  io_uring ring_{};
  bool ok_ = false;
};

// The smallest request a read is split into: below it, another request in
// flight costs more than it gains.
constexpr uint64_t kMinRequestBytes = uint64_t{1} << 20;
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<DirectFile>> DirectFile::Open(int fd, const std::string& name) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": its filesystem (", fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs",
                     ") keeps files in memory: a direct read would copy from memory as a "
                     "buffered one does"));
  }
  // The same open file, opened again: /proc/self/fd names it even when
  // its path has changed since.
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  int direct = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (direct < 0 && errno == ENOENT) direct = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (direct < 0) {
    const int err = errno;
    return ErrnoError(
        err, name, err == EINVAL ? "the filesystem refuses O_DIRECT" : "cannot open with O_DIRECT");
  }
  struct stat a, b;
  if (::fstat(fd, &a) != 0 || ::fstat(direct, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino) {
    ::close(direct);
    return absl::UnavailableError(
        absl::StrCat(name, ": opened with O_DIRECT, it is no longer the file being loaded"));
  }
  return std::unique_ptr<DirectFile>(new DirectFile(direct, name));
}

DirectFile::~DirectFile() { ::close(fd_); }

std::string_view DirectFile::Queue() {
#if PTD_HAVE_LIBURING
  return g_uring.load(std::memory_order_relaxed) ? "io_uring" : "threads";
#else
  return "threads";
#endif
}

absl::StatusOr<size_t> DirectFile::ReadSync(uint64_t offset, absl::Span<uint8_t> dst) const {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n =
        ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(
          errno, name_,
          absl::StrCat("O_DIRECT read of ", dst.size() - done, " bytes at offset ", offset + done));
    }
    if (n == 0) break;  // The end of the file.
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::StatusOr<size_t> DirectFile::Read(uint64_t offset, absl::Span<uint8_t> dst) const {
#if PTD_HAVE_LIBURING
  thread_local ThreadRing ring;
  io_uring* r = dst.size() >= 2 * kMinRequestBytes ? ring.get() : nullptr;
  if (r == nullptr) return ReadSync(offset, dst);
  // kQueueDepth requests at most, each a kAlignment multiple.
  const uint64_t parts =
      std::min<uint64_t>(kQueueDepth, std::max<uint64_t>(1, dst.size() / kMinRequestBytes));
  const uint64_t step = (dst.size() / parts + kAlignment - 1) / kAlignment * kAlignment;
  struct Request {
    uint64_t at = 0, len = 0;
    int64_t got = -1;
  } requests[kQueueDepth];
  size_t queued = 0;
  for (uint64_t at = 0; at < dst.size() && queued < parts; at += step) {
    io_uring_sqe* sqe = ::io_uring_get_sqe(r);
    if (sqe == nullptr) break;
    requests[queued] = Request{at, std::min<uint64_t>(step, dst.size() - at), -1};
    ::io_uring_prep_read(sqe, fd_, dst.data() + at, static_cast<unsigned>(requests[queued].len),
                         offset + at);
    ::io_uring_sqe_set_data64(sqe, queued);
    ++queued;
  }
  int submitted = ::io_uring_submit(r);
  while (submitted == -EINTR) submitted = ::io_uring_submit(r);
  if (submitted < 0 || static_cast<size_t>(submitted) != queued) {
    // Nothing (or not all) in flight: wait for what went, then read it all
    // the plain way.
    for (int k = 0; k < std::max(submitted, 0); ++k) {
      io_uring_cqe* cqe = nullptr;
      while (::io_uring_wait_cqe(r, &cqe) == -EINTR) {
      }
      if (cqe != nullptr) ::io_uring_cqe_seen(r, cqe);
    }
    return ReadSync(offset, dst);
  }
  for (size_t k = 0; k < queued; ++k) {
    io_uring_cqe* cqe = nullptr;
    int rc;
    while ((rc = ::io_uring_wait_cqe(r, &cqe)) == -EINTR) {
    }
    if (rc < 0) return ErrnoError(-rc, name_, "waiting for an O_DIRECT read");
    requests[::io_uring_cqe_get_data64(cqe)].got = cqe->res;
    ::io_uring_cqe_seen(r, cqe);
  }
  // A short request (the end of the file, or a partial read) is finished
  // the plain way; the read ends where the file does.
  size_t total = 0;
  for (size_t k = 0; k < queued; ++k) {
    const Request& q = requests[k];
    if (q.got < 0) {
      return ErrnoError(
          static_cast<int>(-q.got), name_,
          absl::StrCat("O_DIRECT read of ", q.len, " bytes at offset ", offset + q.at));
    }
    uint64_t got = static_cast<uint64_t>(q.got);
    if (got < q.len && got % kAlignment == 0) {
      auto rest = ReadSync(offset + q.at + got, dst.subspan(q.at + got, q.len - got));
      if (!rest.ok()) return rest.status();
      got += *rest;
    }
    total += got;
    if (got < q.len) return total;  // The file ended inside this request.
  }
  return total;
#else
  return ReadSync(offset, dst);
#endif
}

}  // namespace ptd::internal
