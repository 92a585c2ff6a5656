#include "ptd/scalar_type.h"

#include <array>

namespace ptd {
namespace {

struct TypeInfo {
  std::string_view name;
  uint32_t size;
};

constexpr std::array<TypeInfo, kNumScalarTypes> kTypes = {{
    {"Byte", 1},
    {"Char", 1},
    {"Short", 2},
    {"Int", 4},
    {"Long", 8},
    {"Half", 2},
    {"Float", 4},
    {"Double", 8},
    {"ComplexHalf", 4},
    {"ComplexFloat", 8},
    {"ComplexDouble", 16},
    {"Bool", 1},
    {"QInt8", 1},
    {"QUInt8", 1},
    {"QInt32", 4},
    {"BFloat16", 2},
    {"QUInt4x2", 1},
    {"QUInt2x4", 1},
    {"Bits1x8", 1},
    {"Bits2x4", 1},
    {"Bits4x2", 1},
    {"Bits8", 1},
    {"Bits16", 2},
    {"Float8_e5m2", 1},
    {"Float8_e4m3fn", 1},
    {"Float8_e5m2fnuz", 1},
    {"Float8_e4m3fnuz", 1},
    {"UInt16", 2},
    {"UInt32", 4},
    {"UInt64", 8},
}};

}  // namespace

// The header's size table and this one agree, entry by entry.
constexpr bool SizesAgree() {
  for (size_t i = 0; i < kTypes.size(); ++i) {
    if (kTypes[i].size != internal::kElementSizes[i]) return false;
  }
  return true;
}
static_assert(SizesAgree(), "kElementSizes disagrees with kTypes");

std::string_view ScalarTypeName(int64_t type) {
  if (type < 0 || type >= kNumScalarTypes) return "unknown";
  return kTypes[static_cast<size_t>(type)].name;
}

bool UpstreamCudaAcceptsDtype(int64_t type) {
  switch (type) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 11:
    case 15:
      return true;
    default:
      return false;
  }
}

std::string_view UpstreamCudaDtypeList() {
  return "Byte, Char, Short, Int, Long, Half, Float, Bool and BFloat16";
}

}  // namespace ptd
