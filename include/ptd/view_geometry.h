// View geometry: the byte span a strided view needs from its storage.
//
// One module, free of I/O, used by the writer half, the verifier and the
// loader alike (docs/SPEC.md section 3, rules G1 and G2). For element size
// e, sizes s, strides t and offset o (elements):
//   required_nbytes = 0 if any s[i] == 0,
//                     else (o + sum(t[i] * (s[i] - 1)) + 1) * e
// in overflow-checked signed 64-bit arithmetic. Broadcast (stride 0),
// overlapping, transposed, channels-last, 0-dim and empty views are valid.
#ifndef PTD_VIEW_GEOMETRY_H_
#define PTD_VIEW_GEOMETRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace ptd {

inline constexpr uint64_t kSaturatedNumel = ~uint64_t{0};

struct ViewSpec {
  uint32_t element_size = 1;
  int64_t storage_offset = 0;  // Elements.
  absl::Span<const int64_t> sizes;
  absl::Span<const int64_t> strides;  // Elements; same length as sizes.
};

// The extent of a view in its storage, in bytes.
struct ViewExtent {
  uint64_t required_nbytes = 0;  // One past the last byte reached; 0 if empty.
  uint64_t first_byte = 0;       // storage_offset * e; meaningful if not empty.
  uint64_t numel = 0;            // Product of sizes; kSaturatedNumel if over 2^64 - 1.
  bool empty() const { return numel == 0; }
};

enum class GeometryError {
  kNone,
  kRankMismatch,  // sizes and strides differ in length.
  kNegative,      // A size, stride or the offset is negative.
  kOverflow,      // G1.
};

struct GeometryResult {
  GeometryError error = GeometryError::kNone;
  ViewExtent extent;
  // For errors: which value is bad or which step overflowed, in words.
  std::string detail;
  bool ok() const { return error == GeometryError::kNone; }
};

// Computes the view's extent. Never wraps: an overflow is kOverflow (G1).
GeometryResult ComputeExtent(const ViewSpec& view);

// True when the view's elements, taken in row-major order of `sizes`, are
// exactly the bytes [first_byte, required_nbytes) in order (a compact view).
bool IsContiguous(const ViewSpec& view);

// Row-major contiguous strides for `sizes` (the strides of a compact tensor).
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes);

}  // namespace ptd

#endif  // PTD_VIEW_GEOMETRY_H_
