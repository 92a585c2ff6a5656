#include "ptd/file_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

#include "runtime/internal/checked_math.h"
#include "runtime/internal/strings.h"

namespace ptd {

absl::StatusOr<std::shared_ptr<uint8_t>> FileSource::MapPrivate(uint64_t offset, uint64_t len,
                                                                size_t threads) const {
  (void)offset;
  (void)len;
  (void)threads;
  return absl::UnimplementedError(absl::StrCat(name(), ": this source cannot be mapped"));
}

namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14; older headers lack it.
#endif

// Whether madvise(MADV_POPULATE_READ) works here; cleared at the first
// EINVAL (a kernel before 5.14), after which pages fault in on first use.
std::atomic<bool> g_populate_read{true};

// At least this much of a mapping per populating thread (a thread costs
// more than populating less).
constexpr size_t kPopulateBytesPerThread = size_t{32} << 20;

// MADV_POPULATE_READ over [p, p + n) (p page-aligned) in up to `threads`
// page-aligned parts at once, the calling thread taking one. 0, or the
// first part's errno (EINVAL, a kernel without it, is 0: pages then fault
// in on first access; EINTR is retried).
int PopulateRead(uint8_t* p, size_t n, size_t page, size_t threads) {
  if (!g_populate_read.load(std::memory_order_relaxed)) return 0;
  const auto populate = [](uint8_t* lo, size_t len) -> int {
    while (::madvise(lo, len, MADV_POPULATE_READ) != 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL) {
        g_populate_read.store(false, std::memory_order_relaxed);
        return 0;
      }
      return errno;
    }
    return 0;
  };
  const size_t parts = std::max<size_t>(1, std::min(threads, n / kPopulateBytesPerThread));
  const size_t step = (n / parts + page - 1) / page * page;
  std::vector<int> errs(parts, 0);
  const auto part = [&](size_t i) {
    if (i * step < n) errs[i] = populate(p + i * step, std::min(step, n - i * step));
  };
  std::vector<std::thread> workers;
  size_t started = 1;
  for (; started < parts; ++started) {
    try {
      workers.emplace_back(part, started);
    } catch (const std::system_error&) {
      break;  // No more threads: the calling thread does the rest.
    }
  }
  part(0);
  for (size_t i = started; i < parts; ++i) part(i);
  for (std::thread& t : workers) t.join();
  for (int e : errs) {
    if (e != 0) return e;
  }
  return 0;
}

absl::Status ErrnoStatus(int err, std::string_view what, const std::string& path) {
  std::string msg = absl::StrCat(path, ": ", internal::Sv(what), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

absl::Status OutOfRange(const std::string& name, uint64_t offset, uint64_t len, uint64_t size) {
  return absl::OutOfRangeError(absl::StrCat(name, ": read of ", len, " bytes at offset ", offset,
                                            " is past the end of a ", size, "-byte file"));
}

// Opens `path` read-only and checks that it is a regular file. The open
// never blocks: O_NONBLOCK makes a FIFO (or a device) open at once, and the
// type check below rejects it; a regular file ignores the flag.
absl::StatusOr<std::pair<int, uint64_t>> OpenRegular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file (", kind, ")"));
  }
  // Reads block as usual (O_NONBLOCK only mattered for the open).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot set flags", path);
  }
  return std::make_pair(fd, static_cast<uint64_t>(st.st_size));
}

class MmapSource final : public FileSource {
 public:
  MmapSource(std::string name, const uint8_t* base, uint64_t size)
      : name_(std::move(name)), base_(base), size_(size) {}
  ~MmapSource() override {
    if (size_ > 0) ::munmap(const_cast<uint8_t*>(base_), size_);
  }
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (!internal::RangeInside(offset, dst.size(), size_)) {
      return OutOfRange(name_, offset, dst.size(), size_);
    }
    if (!dst.empty()) std::memcpy(dst.data(), base_ + offset, dst.size());
    return absl::OkStatus();
  }
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const override {
    if (!internal::RangeInside(offset, len, size_)) return std::nullopt;
    return absl::Span<const uint8_t>(base_ + offset, len);
  }

 private:
  std::string name_;
  const uint8_t* base_;
  uint64_t size_;
};

class PreadSource final : public FileSource {
 public:
  PreadSource(std::string name, int fd, uint64_t size)
      : name_(std::move(name)), fd_(fd), size_(size) {}
  ~PreadSource() override { ::close(fd_); }
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (!internal::RangeInside(offset, dst.size(), size_)) {
      return OutOfRange(name_, offset, dst.size(), size_);
    }
    size_t done = 0;
    while (done < dst.size()) {
      const ssize_t n =
          ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read failed", name_);
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(name_, ": file ended at ", offset + done,
                                                " while reading ", dst.size(), " bytes at offset ",
                                                offset, " (it shrank after open)"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<uint8_t>> MapPrivate(uint64_t offset, uint64_t len,
                                                      size_t threads) const override {
    if (len == 0 || !internal::RangeInside(offset, len, size_)) {
      return OutOfRange(name_, offset, len, size_);
    }
    // Mapping past the end would SIGBUS on touch instead of failing here.
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, "cannot stat", name_);
    if (static_cast<uint64_t>(st.st_size) < offset + len) {
      return absl::DataLossError(
          absl::StrCat(name_, ": file is ", st.st_size, " bytes now, too short to map ", len,
                       " bytes at offset ", offset, " (it shrank after open)"));
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset - offset % page;
    const size_t map_len = static_cast<size_t>(len + (offset - start));
    void* p = ::mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_,
                     static_cast<off_t>(start));
    if (p == MAP_FAILED) {
      if (errno == ENOMEM) {
        return absl::ResourceExhaustedError(
            absl::StrCat(name_, ": cannot map ", map_len, " bytes: ", std::strerror(ENOMEM)));
      }
      return ErrnoStatus(errno, "cannot map", name_);
    }
    std::shared_ptr<uint8_t> mapped(static_cast<uint8_t*>(p) + (offset - start),
                                    [p, map_len](uint8_t*) { ::munmap(p, map_len); });
    const int err = PopulateRead(static_cast<uint8_t*>(p), map_len, page, threads);
    if (err == EFAULT) {  // The file ended inside the range.
      return absl::DataLossError(absl::StrCat(name_, ": file ended while mapping ", len,
                                              " bytes at offset ", offset,
                                              " (it shrank after open)"));
    }
    if (err == ENOMEM) {
      return absl::ResourceExhaustedError(absl::StrCat(name_, ": cannot populate ", map_len,
                                                       " mapped bytes: ", std::strerror(err)));
    }
    if (err != 0) return ErrnoStatus(err, "cannot populate mapping", name_);
    return mapped;
  }

  int descriptor() const override { return fd_; }

 private:
  std::string name_;
  int fd_;
  uint64_t size_;
};

class MemorySourceImpl final : public FileSource {
 public:
  MemorySourceImpl(std::vector<uint8_t> bytes, std::string name)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
    if (!internal::RangeInside(offset, dst.size(), bytes_.size())) {
      return OutOfRange(name_, offset, dst.size(), bytes_.size());
    }
    if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
    return absl::OkStatus();
  }
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const override {
    if (!internal::RangeInside(offset, len, bytes_.size())) return std::nullopt;
    return absl::Span<const uint8_t>(bytes_.data() + offset, len);
  }

 private:
  std::string name_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

absl::StatusOr<Bytes> ReadBytes(const FileSource& source, uint64_t offset, uint64_t len) {
  if (auto view = source.View(offset, len)) return Bytes::Borrowed(*view);
  if (!internal::RangeInside(offset, len, source.size())) {
    return OutOfRange(source.name(), offset, len, source.size());
  }
  uint8_t* data = nullptr;
  Bytes bytes = Bytes::Allocate(static_cast<size_t>(len), &data);
  auto status = source.ReadAt(offset, absl::MakeSpan(data, static_cast<size_t>(len)));
  if (!status.ok()) return status;
  return bytes;
}

absl::StatusOr<std::unique_ptr<FileSource>> OpenMmapFile(const std::string& path) {
  auto opened = OpenRegular(path);
  if (!opened.ok()) return opened.status();
  const auto [fd, size] = *opened;
  const uint8_t* base = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot map", path);
    }
    base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps the file alive.
  return std::unique_ptr<FileSource>(new MmapSource(path, base, size));
}

absl::StatusOr<std::unique_ptr<FileSource>> OpenPreadFile(const std::string& path) {
  auto opened = OpenRegular(path);
  if (!opened.ok()) return opened.status();
  const auto [fd, size] = *opened;
  return std::unique_ptr<FileSource>(new PreadSource(path, fd, size));
}

std::unique_ptr<FileSource> MemorySource(std::vector<uint8_t> bytes, std::string name) {
  return std::make_unique<MemorySourceImpl>(std::move(bytes), std::move(name));
}

absl::StatusOr<std::shared_ptr<const FileSource>> OpenFile(const std::string& path, bool use_mmap) {
  auto s = use_mmap ? OpenMmapFile(path) : OpenPreadFile(path);
  if (!s.ok()) return s.status();
  return std::shared_ptr<const FileSource>(std::move(*s));
}

}  // namespace ptd
