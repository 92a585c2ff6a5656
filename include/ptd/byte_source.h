// ByteSource: where the loader gets the bytes of a storage key.
//
// The loader asks a ByteSource for "the bytes of key K at offset O, into
// this buffer". Two implementations: over a .ptd container read with
// pread(2) (MakeContainerByteSource, here), and over an ExecuTorch
// NamedDataMap (ptd::executorch: MakeNamedDataMapByteSource in
// ptd/executorch/named_data_map_source.h). A source that knows where keys sit
// (Locate) lets the loader share one copy among keys that name one stored
// segment and read neighbouring segments in one call (ReadLocated).
//
// Thread-safety: implementations must allow concurrent const calls (the
// loader reads from several threads).
#ifndef PTD_BYTE_SOURCE_H_
#define PTD_BYTE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/container.h"
#include "ptd/file_source.h"

namespace ptd {

class ByteSource {
 public:
  virtual ~ByteSource() = default;

  // For messages: the file name, or what the source reads from.
  virtual std::string name() const = 0;

  // Every key, in the source's order (for loading without a manifest).
  virtual std::vector<std::string> Keys() const = 0;

  // Number of bytes stored under `key`; NotFound when there is no such key.
  virtual absl::StatusOr<uint64_t> Size(std::string_view key) const = 0;

  // Reads dst.size() bytes of `key`'s bytes starting at `offset`. DataLoss
  // when the underlying file ended early (it shrank), OutOfRange for a range
  // outside the key's bytes, NotFound for an unknown key.
  virtual absl::Status ReadAt(std::string_view key, uint64_t offset,
                              absl::Span<uint8_t> dst) const = 0;

  // Where a key's bytes sit, when the source knows: `segment` identifies the
  // stored bytes (keys with equal segments share them) and `offset` is their
  // position in one address space shared by all keys (the file offset), in
  // which ReadLocated reads. nullopt (the default): each key is read alone
  // through ReadAt.
  struct Location {
    uint64_t segment = 0;
    uint64_t offset = 0;
  };
  virtual std::optional<Location> Locate(std::string_view key) const {
    (void)key;
    return std::nullopt;
  }

  // Reads dst.size() bytes at `offset` of Locate's address space (spanning
  // several keys and the padding between them). Only called for ranges
  // between located keys. Default: Unimplemented.
  virtual absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const;

  // A private, populated, copy-on-write mapping of `len` bytes at `offset`
  // of Locate's address space, when the source reads a file it can map
  // (FileSource::MapPrivate, whose caveats apply). Only called for ranges
  // between located keys; `threads` populate it. Default: Unimplemented
  // (the loader then reads).
  virtual absl::StatusOr<std::shared_ptr<uint8_t>> MapLocated(uint64_t offset, uint64_t len,
                                                              size_t threads) const;

  // The file whose offsets Locate's address space is, when there is one
  // (a .ptd's pread source): the loader's read engines (LoadOptions::io)
  // read it past the page cache or ask the page cache about it. Default:
  // null (every read goes through ReadAt and ReadLocated).
  virtual const FileSource* LocatedFile() const { return nullptr; }
};

// A ByteSource over `container`'s keys that reads bytes through `data` (a
// pread source of the same file: the loader reads through a mapping only
// when LoadOptions::map_file asks, so a file truncated under it is a
// DataLoss, not SIGBUS; MapLocated maps through `data`). With `data` null,
// reads go through the container's own source. The container must outlive
// the returned source.
std::unique_ptr<ByteSource> MakeContainerByteSource(
    const Container& container, std::shared_ptr<const FileSource> data = nullptr);

}  // namespace ptd

#endif  // PTD_BYTE_SOURCE_H_
