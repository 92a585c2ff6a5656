// ExecuTorch ScalarType numbering (SPEC section 1) and element sizes.
#ifndef PTD_SCALAR_TYPE_H_
#define PTD_SCALAR_TYPE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace ptd {

inline constexpr int kNumScalarTypes = 30;  // 0..29 are known.

namespace internal {
// Element sizes of ScalarTypes 0..kNumScalarTypes-1, in that order (names:
// scalar_type.cc, whose table is checked against this one).
inline constexpr uint8_t kElementSizes[kNumScalarTypes] = {
    1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 4, 8};
}  // namespace internal

// Element size in bytes of ScalarType `type`, or nullopt when unknown.
// Inline: every weight's checks ask.
inline std::optional<uint32_t> ElementSize(int64_t type) {
  if (type < 0 || type >= kNumScalarTypes) return std::nullopt;
  return internal::kElementSizes[type];
}

// Upstream name ("Float", "BFloat16", ...), or "unknown".
std::string_view ScalarTypeName(int64_t type);

// True for the nine dtypes upstream's CUDA runtime loads from a weight
// manifest (Byte, Char, Short, Int, Long, Half, Float, Bool, BFloat16); its
// parser refuses every other one with a bare InvalidProgram (warning U1).
bool UpstreamCudaAcceptsDtype(int64_t type);

// "Byte, Char, Short, Int, Long, Half, Float, Bool and BFloat16".
std::string_view UpstreamCudaDtypeList();

}  // namespace ptd

#endif  // PTD_SCALAR_TYPE_H_
