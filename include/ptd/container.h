// Container: a verified, read-only .ptd (ExecuTorch FlatTensor) file.
//
// Opening checks every structural rule (H1-H5, C1-C8; docs/SPEC.md section
// 1) before any data access, decodes the FlatBuffer once into plain structs,
// and builds a hash index of the keys so that a lookup is O(1). After that,
// data access hands out spans into the mapping (or owned buffers from a
// pread source), bounded by the segment.
//
// Two ways in:
//   Container::Open()    for use: the first error as an absl::Status.
//   Container::Verify()  for diagnosis: every error and warning in a Report,
//                        and the container when its structure was readable.
//
// Example:
//   absl::StatusOr<std::shared_ptr<const FileSource>> file = OpenFile("model.ptd");
//   if (!file.ok()) return file.status();         // NotFound naming the path.
//   absl::StatusOr<std::unique_ptr<Container>> c = Container::Open(*file);
//   if (!c.ok()) return c.status();               // DataLoss "... (C4)".
//   for (const NamedDataEntry& e : (*c)->named_data()) {
//     absl::StatusOr<Bytes> bytes = (*c)->Get(e.key);  // A view of the mapping.
//   }
//
// Lifetime: the FileSource is shared and kept alive by the Container; spans
// returned by SegmentData() live as long as the Container.
// Thread-safety: const methods are safe to call concurrently.
#ifndef PTD_CONTAINER_H_
#define PTD_CONTAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"

#include "ptd/file_source.h"
#include "ptd/report.h"
#include "ptd/tensor_layout.h"

namespace ptd {

inline constexpr uint32_t kPtdVersion = 0;
inline constexpr uint64_t kMinPtdFileSize = 64;      // H1
inline constexpr uint32_t kPtdHeaderLength = 40;     // Written; readers need >= 40.
inline constexpr uint64_t kPtdHeaderBlockSize = 48;  // 40 padded to 16.

// The extended header at file offset 8 (SPEC section 1).
struct PtdHeader {
  uint32_t header_length = 0;
  uint64_t flatbuffer_offset = 0;
  uint64_t flatbuffer_size = 0;
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
};

struct Segment {
  uint64_t offset = 0;  // Relative to segment_base_offset.
  uint64_t size = 0;
  bool in_bounds = true;  // False when C4 failed: no data access.
};

struct NamedDataEntry {
  // A view into the Container's FlatBuffer bytes, which it keeps: valid for
  // the Container's lifetime, and followed by a NUL (the FlatBuffers
  // verifier checks it).
  std::string_view key;
  uint32_t segment_index = 0;
  // The entry's layout, owned by the Container; null when it has none.
  const TensorLayout* layout = nullptr;
};

class Container {
 public:
  // Opens for use: fails with the first violated rule (DataLoss; Unimplemented
  // for a newer version), naming the file, the rule and both numbers.
  static absl::StatusOr<std::unique_ptr<Container>> Open(std::shared_ptr<const FileSource> source);

  // Checks every rule, appending each error and warning to `report`. Returns
  // the container whenever the header and the FlatBuffer were sound enough to
  // decode (H1-H4 and C1 hold, C3 present), even with later errors, so that
  // cross-checks can go on; nullptr otherwise.
  static std::unique_ptr<Container> Verify(std::shared_ptr<const FileSource> source,
                                           Report* report);

  // Not copyable: the entries' keys and the key index view the FlatBuffer
  // bytes the Container holds, and the entries point at its layouts.
  // Movable: those bytes (a view of the mapping or one owned buffer) and the
  // layouts' buffer move whole, so every view stays valid. Open and
  // Verify hand Containers out by unique_ptr.
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;
  Container(Container&&) noexcept = default;
  Container& operator=(Container&&) noexcept = default;

  const FileSource& source() const { return *source_; }
  const std::string& path() const { return source_->name(); }
  const PtdHeader& header() const { return header_; }
  uint32_t version() const { return version_; }
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<NamedDataEntry>& named_data() const { return named_data_; }

  // The named-data entry with `key`, or nullptr. O(1).
  const NamedDataEntry* Find(std::string_view key) const;

  // True when Find finds every entry under its own key: each key decoded
  // (C8) and appears once (C6).
  bool AllKeysIndexed() const { return index_.size() == named_data_.size(); }

  // Size of the segment behind `entry`, or nullopt when its index is bad (C7).
  std::optional<uint64_t> SegmentSize(const NamedDataEntry& entry) const {
    if (entry.segment_index >= segments_.size()) return std::nullopt;
    return segments_[entry.segment_index].size;
  }

  // Bytes of segment `index`: a view into the mapping or an owned copy.
  // OutOfRange for a bad index, DataLoss for a segment that broke C4.
  absl::StatusOr<Bytes> SegmentData(uint32_t index) const;
  // Bytes behind `key`; NotFound when no such key.
  absl::StatusOr<Bytes> Get(std::string_view key) const;

  // Absolute file offset of segment `index` (base + offset). REQUIRES: index
  // is valid and the segment is in bounds.
  uint64_t SegmentFileOffset(uint32_t index) const {
    return header_.segment_base_offset + segments_[index].offset;
  }

  // The largest power of two (<= 1 MiB) that divides segment_base_offset and
  // every non-empty segment's offset: the most the writer's alignment can
  // have been. Reported, never enforced.
  uint64_t ObservedSegmentAlignment() const;

 private:
  // Hashes and compares named-data entries by key, and keys against them: an
  // index of entries that is a set of 8-byte pointers, not of (key, index)
  // pairs three times the size.
  struct NamedDataKeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return absl::Hash<std::string_view>{}(key); }
    size_t operator()(const NamedDataEntry* e) const { return (*this)(e->key); }
  };
  struct NamedDataKeyEq {
    using is_transparent = void;
    static std::string_view Key(std::string_view key) { return key; }
    static std::string_view Key(const NamedDataEntry* e) { return e->key; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Key(a) == Key(b);
    }
  };

  explicit Container(std::shared_ptr<const FileSource> source) : source_(std::move(source)) {}

  std::shared_ptr<const FileSource> source_;
  PtdHeader header_;
  Bytes flatbuffer_;  // [0, flatbuffer_offset + flatbuffer_size): keys view it.
  uint32_t version_ = 0;
  std::vector<Segment> segments_;
  std::vector<NamedDataEntry> named_data_;
  std::vector<TensorLayout> layouts_;  // Sized once: entries point into it.
  // Entries by key: pointers into named_data_, which never reallocates
  // once decoded (and keeps its buffer when the Container moves).
  absl::flat_hash_set<const NamedDataEntry*, NamedDataKeyHash, NamedDataKeyEq> index_;
};

}  // namespace ptd

#endif  // PTD_CONTAINER_H_
