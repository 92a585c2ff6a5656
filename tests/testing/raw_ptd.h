// Builds .ptd bytes field by field, including invalid ones, for corruption
// tests. The layout is the writer's (header block 48, segments at the given
// offsets), but nothing is validated.
#ifndef PTD_TESTS_TESTING_RAW_PTD_H_
#define PTD_TESTS_TESTING_RAW_PTD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/ptd/ext_header.h"
#include "tests/testing/patch.h"

namespace ptd::testing {

struct RawSegment {
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct RawLayout {
  int8_t scalar_type = 6;
  std::optional<std::vector<int32_t>> sizes = std::vector<int32_t>{};
  std::optional<std::vector<uint8_t>> dim_order = std::vector<uint8_t>{};
};

struct RawNamed {
  std::optional<std::string> key;
  uint32_t segment_index = 0;
  std::optional<RawLayout> layout;
};

struct RawPtd {
  uint32_t version = 0;
  std::optional<std::vector<RawSegment>> segments = std::vector<RawSegment>{};
  std::optional<std::vector<RawNamed>> named_data = std::vector<RawNamed>{};
  std::vector<uint8_t> data;  // The segment data region.
  uint64_t segment_alignment = 128;
};

std::vector<uint8_t> BuildRawPtd(const RawPtd& spec);

// A valid three-key file: "a" (float 2x3, 24 bytes), "b" (int8 16 bytes, no
// layout) and "c" sharing a's segment; segments at 0 and 128.
RawPtd ValidRawPtd();

// Header field offsets, for patching (the codec's own).
inline constexpr size_t kHeaderLengthAt = internal::kPtdHeaderLengthAt;
inline constexpr size_t kFlatbufferOffsetAt = internal::kPtdFlatbufferOffsetAt;
inline constexpr size_t kFlatbufferSizeAt = internal::kPtdFlatbufferSizeAt;
inline constexpr size_t kSegmentBaseAt = internal::kPtdSegmentBaseAt;
inline constexpr size_t kSegmentDataSizeAt = internal::kPtdSegmentDataSizeAt;

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_RAW_PTD_H_
