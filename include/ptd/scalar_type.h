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

// True for the nine dtypes upstream's CUDA runtime loads from a weight
// manifest (Byte, Char, Short, Int, Long, Half, Float, Bool, BFloat16); its
// parser refuses every other one with a bare InvalidProgram (warning U1).
bool UpstreamCudaAcceptsDtype(int64_t type);

// "Byte, Char, Short, Int, Long, Half, Float, Bool and BFloat16".
std::string_view UpstreamCudaDtypeList();

}  // namespace ptd

#endif  // PTD_SCALAR_TYPE_H_
