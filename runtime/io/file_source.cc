#include "ptd/file_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

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

absl::Status OutOfRange(const std::string& name, uint64_t offset, uint64_t len,
                        uint64_t size) {
  return absl::OutOfRangeError(absl::StrCat(name, ": read of ", len,
                                            " bytes at offset ", offset,
                                            " is past the end of a ", size,
                                            "-byte file"));
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
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", kind, ")"));
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
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset,
                                                uint64_t len) const override {
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
      const ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done,
                                static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read failed", name_);
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(
            name_, ": file ended at ", offset + done, " while reading ",
            dst.size(), " bytes at offset ", offset, " (it shrank after open)"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

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
  std::optional<absl::Span<const uint8_t>> View(uint64_t offset,
                                                uint64_t len) const override {
    if (!internal::RangeInside(offset, len, bytes_.size())) return std::nullopt;
    return absl::Span<const uint8_t>(bytes_.data() + offset, len);
  }

 private:
  std::string name_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

absl::StatusOr<Bytes> ReadBytes(const FileSource& source, uint64_t offset,
                                uint64_t len) {
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

std::unique_ptr<FileSource> MemorySource(std::vector<uint8_t> bytes,
                                         std::string name) {
  return std::make_unique<MemorySourceImpl>(std::move(bytes), std::move(name));
}

absl::StatusOr<std::shared_ptr<const FileSource>> OpenFile(const std::string& path,
                                                           bool use_mmap) {
  auto s = use_mmap ? OpenMmapFile(path) : OpenPreadFile(path);
  if (!s.ok()) return s.status();
  return std::shared_ptr<const FileSource>(std::move(*s));
}

}  // namespace ptd
