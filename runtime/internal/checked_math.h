// Overflow-checked integer arithmetic. Every offset and size computed from
// file contents goes through these helpers; none of them can wrap.
#ifndef PTD_INTERNAL_CHECKED_MATH_H_
#define PTD_INTERNAL_CHECKED_MATH_H_

#include <cstdint>
#include <optional>

namespace ptd::internal {

inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// True when [offset, offset + len) lies inside [0, size), written so that it
// cannot overflow (the FlatBuffers verifier idiom).
inline bool RangeInside(uint64_t offset, uint64_t len, uint64_t size) {
  return len <= size && offset <= size - len;
}

// Rounds `value` up to a multiple of `alignment` (> 0); nullopt on overflow.
inline std::optional<uint64_t> AlignUp(uint64_t value, uint64_t alignment) {
  const uint64_t rem = value % alignment;
  if (rem == 0) return value;
  return CheckedAdd(value, alignment - rem);
}

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_CHECKED_MATH_H_
