// PteBuilder: writes small .pte files for tests, laid out as the upstream
// ExecuTorch program serializer lays them out: a FlatBuffer (identifier ET12)
// with the extended header ("eh00") spliced in after its first 8 bytes and
// the root offset adjusted, then the segments, each aligned, from
// segment_base_offset on. Corruption tests patch the result with the
// offsets below.
#ifndef PTD_TESTS_TESTING_PTE_BUILDER_H_
#define PTD_TESTS_TESTING_PTE_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/ptd/ext_header.h"
#include "tests/testing/patch.h"

namespace ptd::testing {

// Offsets of the extended header's fields in a built file (the codec's own).
inline constexpr size_t kPteMagicOffset = internal::kExtHeaderAt;
inline constexpr size_t kPteHeaderLengthOffset = internal::kPteHeaderLengthAt;
inline constexpr size_t kPteProgramSizeOffset = internal::kPteProgramSizeAt;
inline constexpr size_t kPteSegmentBaseOffset = internal::kPteSegmentBaseAt;
inline constexpr size_t kPteSegmentDataSizeOffset = internal::kPteSegmentDataSizeAt;

struct PteDelegateSpec {
  std::string id = "CudaBackend";
  int8_t location = 1;  // 0 INLINE, 1 SEGMENT; other values for corruption.
  uint32_t index = 0;
  bool has_processed = true;  // False: no processed reference at all.
};

struct PtePlanSpec {
  std::string name;
  std::vector<PteDelegateSpec> delegates;
};

struct PteSegmentEntry {
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct PteSpec {
  std::vector<PtePlanSpec> plans;
  // Program.backend_delegate_data; nullopt writes an entry without `data`.
  std::vector<std::optional<std::vector<uint8_t>>> inline_data;
  // Segment bytes, written after the FlatBuffer.
  std::vector<std::vector<uint8_t>> segments;
  // When set, the segment table written instead of the real offsets/sizes
  // (the bytes of `segments` are still written).
  std::optional<std::vector<PteSegmentEntry>> segment_table;
  std::vector<std::pair<std::string, uint32_t>> named_data;
  uint32_t header_length = 32;  // 24 omits segment_data_size.
  uint64_t segment_alignment = 128;
};

// Builds the .pte bytes.
std::vector<uint8_t> BuildPte(const PteSpec& spec);

std::vector<uint8_t> ToBytes(std::string_view s);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_PTE_BUILDER_H_
