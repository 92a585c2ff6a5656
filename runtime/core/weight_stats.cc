// The N1 health scan: NaN and infinite counts and the finite range of a
// floating weight's elements, decoded from their little-endian bytes (f16 and
// bf16 by hand: no half-precision library).
#include "ptd/weight_stats.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

#include "ptd/scalar_type.h"

namespace ptd {
namespace {

constexpr int32_t kHalf = 5;
constexpr int32_t kFloat = 6;
constexpr int32_t kDouble = 7;
constexpr int32_t kBFloat16 = 15;

// IEEE 754 binary16 to double, exactly (every half is a double).
double HalfToDouble(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);  // Subnormal (or zero).
  } else if (exp == 0x1f) {
    v = mant == 0 ? HUGE_VAL : std::nan("");
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

double Decode(int32_t type, const uint8_t* p) {
  switch (type) {
    case kHalf:
      return HalfToDouble(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    case kBFloat16:
      return BitsToFloat(static_cast<uint32_t>(p[0] << 16 | p[1] << 24));
    case kFloat:
      return BitsToFloat(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
    default: {
      uint64_t bits = 0;
      for (int i = 7; i >= 0; --i) bits = bits << 8 | p[i];
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      return d;
    }
  }
}

}  // namespace

bool IsStatsDtype(int32_t scalar_type) {
  return scalar_type == kHalf || scalar_type == kFloat || scalar_type == kDouble ||
         scalar_type == kBFloat16;
}

WeightStatsAccumulator::WeightStatsAccumulator(int32_t scalar_type)
    : scalar_type_(scalar_type), element_size_(ElementSize(scalar_type).value_or(1)) {}

void WeightStatsAccumulator::Add(absl::Span<const uint8_t> bytes) {
  if (!IsStatsDtype(scalar_type_)) return;
  const auto take = [&](const uint8_t* p) {
    const double v = Decode(scalar_type_, p);
    if (std::isnan(v)) {
      ++stats_.nan;
    } else if (std::isinf(v)) {
      ++stats_.inf;
    } else {
      if (!stats_.min || v < *stats_.min) stats_.min = v;
      if (!stats_.max || v > *stats_.max) stats_.max = v;
    }
  };
  size_t i = 0;
  if (carried_ > 0) {  // Complete the element split by the previous chunk.
    // (carried_ < sizeof(carry_) always holds, element_size_ being at most
    // 8; saying so spares GCC 12's -Wstringop-overflow at -O2.)
    while (carried_ < element_size_ && carried_ < sizeof(carry_) && i < bytes.size()) {
      carry_[carried_++] = bytes[i++];
    }
    if (carried_ < element_size_) return;
    take(carry_);
    carried_ = 0;
  }
  for (; i + element_size_ <= bytes.size(); i += element_size_) take(bytes.data() + i);
  while (i < bytes.size() && carried_ < sizeof(carry_)) carry_[carried_++] = bytes[i++];
}

void ReportWeightStats(const WeightStats& stats, const Where& where, Report* report) {
  if (stats.nan == 0 && stats.inf == 0) return;
  report->Warning("N1",
                  absl::StrCat("weight '", where.fqn.value_or(""), "' holds ", stats.nan,
                               " NaN and ", stats.inf, " infinite values"),
                  where);
}

}  // namespace ptd
