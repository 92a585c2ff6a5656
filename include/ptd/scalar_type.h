// ExecuTorch ScalarType numbering (SPEC section 1) and element sizes.
#ifndef PTD_SCALAR_TYPE_H_
#define PTD_SCALAR_TYPE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace ptd {

inline constexpr int kNumScalarTypes = 30;  // 0..29 are known.

// Element size in bytes of ScalarType `type`, or nullopt when unknown.
std::optional<uint32_t> ElementSize(int64_t type);

// Upstream name ("Float", "BFloat16", ...), or "unknown".
std::string_view ScalarTypeName(int64_t type);

}  // namespace ptd

#endif  // PTD_SCALAR_TYPE_H_
