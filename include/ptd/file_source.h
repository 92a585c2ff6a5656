// FileSource: the one read-only file interface of the library.
//
// Nothing else in the library reads files. Three implementations:
//   OpenMmapFile    maps the file; View() hands out zero-copy spans.
//   OpenPreadFile   reads with pread(2) into the caller's buffer; no View().
//   MemorySource    bytes in memory (tests, fuzzers); View() works.
//
// Thread-safety: every method is const and safe to call concurrently.
#ifndef PTD_FILE_SOURCE_H_
#define PTD_FILE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ptd {

class FileSource {
 public:
  virtual ~FileSource() = default;

  // The name used in messages (the path for files).
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;

  // Reads exactly dst.size() bytes at `offset` into `dst`. OutOfRange when
  // the range is not inside the file, DataLoss on a short read (the file
  // shrank), Unavailable for an I/O error.
  virtual absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const = 0;

  // A zero-copy view of [offset, offset + len) valid while the source lives,
  // or nullopt when this source cannot hand out views (pread) or the range
  // is outside the file.
  virtual std::optional<absl::Span<const uint8_t>> View(uint64_t offset, uint64_t len) const {
    (void)offset;
    (void)len;
    return std::nullopt;
  }

  // A private mapping of [offset, offset + len), readable and writable:
  // copy-on-write, so writes through it never reach the file. Its pages
  // are populated for reading (MADV_POPULATE_READ, Linux 5.14+, by up to
  // `threads` threads; older kernels fault them in on first access) and
  // shared with the page cache until written, so mapping a cached file
  // copies nothing. The pointer is to byte `offset` and keeps the mapping
  // alive; the mapping goes with its last copy. OutOfRange for a range
  // outside the file, DataLoss when the file is shorter now than when it
  // was opened, Unimplemented for a source without a file descriptor
  // (mappings, memory).
  //
  // Unlike ReadAt, what the mapping shows can change after it returns: a
  // page not yet written shows the file as it is when the page is touched
  // (another process writing the file in place changes it), and touching a
  // page past the end of a file that another process truncated raises
  // SIGBUS. The loader maps only when asked (LoadOptions::map_file).
  virtual absl::StatusOr<std::shared_ptr<uint8_t>> MapPrivate(uint64_t offset, uint64_t len,
                                                              size_t threads) const;

  // The open file descriptor that ReadAt reads, for engines that read the
  // same file another way (O_DIRECT, the page cache's state); -1 for a
  // source without one (mappings, memory). Owned by the source.
  virtual int descriptor() const { return -1; }
};

// Bytes of a range of a FileSource: a view into a mapping, or an owned copy.
// (ExecuTorch's FreeableBuffer.) Movable, not copyable.
class Bytes {
 public:
  Bytes() = default;
  static Bytes Borrowed(absl::Span<const uint8_t> view) {
    Bytes b;
    b.view_ = view;
    return b;
  }
  // `n` bytes of its own, left uninitialized for the caller to fill
  // through `*data` (a buffer about to be read into is not zeroed first).
  static Bytes Allocate(size_t n, uint8_t** data) {
    Bytes b;
    b.owned_.reset(new uint8_t[n == 0 ? 1 : n]);
    b.view_ = absl::MakeConstSpan(b.owned_.get(), n);
    *data = b.owned_.get();
    return b;
  }
  Bytes(Bytes&& other) noexcept { *this = std::move(other); }
  Bytes& operator=(Bytes&& other) noexcept {
    owned_ = std::move(other.owned_);
    view_ = other.view_;
    other.view_ = {};  // A moved-from Bytes is empty, not a dangling view.
    return *this;
  }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  absl::Span<const uint8_t> span() const { return view_; }
  const uint8_t* data() const { return view_.data(); }
  size_t size() const { return view_.size(); }
  bool borrowed() const { return !view_.empty() && owned_ == nullptr; }

 private:
  // The heap buffer does not move with the object: view_ stays valid.
  std::unique_ptr<uint8_t[]> owned_;
  absl::Span<const uint8_t> view_;
};

// Returns a view of the range when the source has one, else reads it into
// an owned buffer. Fails as ReadAt does.
absl::StatusOr<Bytes> ReadBytes(const FileSource& source, uint64_t offset, uint64_t len);

// NotFound when the file does not exist, PermissionDenied, or Unavailable
// for other open/stat/mmap failures; InvalidArgument for a non-regular file.
//
// A mapping cannot report a file that another process truncates after
// OpenMmapFile: touching a page past the new end raises SIGBUS. Use
// OpenPreadFile (a short read is DataLoss naming the file) where files may
// change under the reader; ptd-verify and WeightBundle read with pread by
// default, and the loader maps only when asked (LoadOptions::map_file,
// through FileSource::MapPrivate).
absl::StatusOr<std::unique_ptr<FileSource>> OpenMmapFile(const std::string& path);
absl::StatusOr<std::unique_ptr<FileSource>> OpenPreadFile(const std::string& path);
// OpenMmapFile or OpenPreadFile, as a shared source.
absl::StatusOr<std::shared_ptr<const FileSource>> OpenFile(const std::string& path,
                                                           bool use_mmap = true);
std::unique_ptr<FileSource> MemorySource(std::vector<uint8_t> bytes, std::string name = "<memory>");

}  // namespace ptd

#endif  // PTD_FILE_SOURCE_H_
