// The health scan (docs/SPEC.md section 7, rule N1): NaN and infinite counts
// and the finite range of a floating weight's elements, decoded from their
// little-endian bytes. ptd-verify --stats (VerifiedWeight::stats) and
// ptd-extract --stats (ExtractedTensor::stats) report it.
//
// Example:
//   if (IsStatsDtype(entry.dtype)) {
//     WeightStatsAccumulator acc(entry.dtype);
//     for (absl::Span<const uint8_t> chunk : chunks) acc.Add(chunk);  // Any split.
//     ReportWeightStats(acc.stats(), Where{.fqn = std::string(entry.fqn)}, &report);
//   }
//
// Thread-safety: an accumulator is not thread-safe (one per weight); the
// free functions have no shared state.
#ifndef PTD_WEIGHT_STATS_H_
#define PTD_WEIGHT_STATS_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"

#include "ptd/report.h"

namespace ptd {

// The health of one floating weight's elements (N1): NaN and infinite
// counts, and the least and greatest finite values (absent when none).
struct WeightStats {
  uint64_t nan = 0;
  uint64_t inf = 0;
  std::optional<double> min;
  std::optional<double> max;
};

// Accumulates WeightStats over a weight's elements, fed in any chunks.
// `scalar_type` must be a floating type (Half, Float, Double, BFloat16);
// IsStatsDtype says which.
class WeightStatsAccumulator {
 public:
  explicit WeightStatsAccumulator(int32_t scalar_type);
  // `bytes` holds whole elements, little-endian; a partial trailing element
  // is carried to the next call.
  void Add(absl::Span<const uint8_t> bytes);
  const WeightStats& stats() const { return stats_; }

 private:
  int32_t scalar_type_;
  uint32_t element_size_;
  uint8_t carry_[8] = {};
  uint32_t carried_ = 0;
  WeightStats stats_;
};
bool IsStatsDtype(int32_t scalar_type);

// The N1 warning for `fqn` when `stats` counts NaN or Inf; nothing otherwise.
void ReportWeightStats(const WeightStats& stats, const Where& where, Report* report);

}  // namespace ptd

#endif  // PTD_WEIGHT_STATS_H_
