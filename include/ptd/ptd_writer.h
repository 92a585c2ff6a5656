// PtdWriter: writes .ptd (FlatTensor) files laid out as the upstream Python
// serializer lays them out.
//
// Layout: the FlatBuffer with a 40-byte extended header spliced in after its
// first 8 bytes (padded to 48), zero padding up to segment_base_offset (a
// multiple of the segment alignment), then each distinct byte string once,
// at a multiple of lcm(segment alignment, entry alignment) relative to the
// base, zero-padded in between. Keys whose bytes are identical share one
// segment (and its alignment is the lcm of theirs). Every file written
// passes every rule of docs/SPEC.md section 1.
//
// Thread-safety: not thread-safe.
#ifndef PTD_PTD_WRITER_H_
#define PTD_PTD_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/atomic_file.h"
#include "ptd/tensor_layout.h"

namespace ptd {
namespace internal {
struct PtdLayout;
}  // namespace internal

inline constexpr uint64_t kDefaultSegmentAlignment = 128;

struct PtdWriterOptions {
  uint64_t segment_alignment = kDefaultSegmentAlignment;  // Power of two.
};

class PtdWriter {
 public:
  explicit PtdWriter(PtdWriterOptions options = {});

  // Adds `key` with a copy of `data`. `alignment` (a power of two; upstream's
  // default is 1) constrains the segment's offset. InvalidArgument for an
  // empty or non-UTF-8 key, a key added before with other bytes or layout, a
  // bad alignment, or a layout that breaks C8 for these bytes.
  absl::Status Add(std::string key, absl::Span<const uint8_t> data, uint64_t alignment = 1,
                   std::optional<TensorLayout> layout = std::nullopt);

  size_t num_keys() const { return entries_.size(); }
  size_t num_segments() const { return buffers_.size(); }

  // The whole file in memory.
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  // Streams the file to `path` atomically (temporary file, fsync, rename).
  absl::Status Write(const std::string& path) const;

 private:
  struct Buffer {
    std::vector<uint8_t> bytes;
    uint64_t alignment = 1;
  };
  struct Entry {
    std::string key;
    uint32_t buffer = 0;
    std::optional<TensorLayout> layout;
  };
  // The layout of the buffers and keys added (runtime/ptd/ptd_layout.h),
  // and the file it gives.
  absl::StatusOr<internal::PtdLayout> MakePlan() const;
  absl::Status Emit(const internal::PtdLayout& plan, const WriteFn& write) const;

  PtdWriterOptions options_;
  std::vector<Buffer> buffers_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, uint32_t> key_index_;
  // Content hash -> indices into buffers_ with that hash.
  absl::flat_hash_map<size_t, std::vector<uint32_t>> content_index_;
};

}  // namespace ptd

#endif  // PTD_PTD_WRITER_H_
