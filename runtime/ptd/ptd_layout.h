// The .ptd writer's planner, private to this repository: how a .ptd's
// segments and named data are laid out, as the upstream Python serializer
// lays them out (include/ptd/ptd_writer.h says how). PtdWriter plans with it,
// and so does reweight (runtime/safetensors/reweight.cc), which streams
// storages it builds rather than bytes it holds.
#ifndef PTD_RUNTIME_PTD_PTD_LAYOUT_H_
#define PTD_RUNTIME_PTD_PTD_LAYOUT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/atomic_file.h"
#include "ptd/container.h"

namespace ptd::internal {

// A segment to lay out: its size, and the alignment (a power of two) its
// offset needs beyond the segment alignment.
struct SegmentToPlace {
  uint64_t size = 0;
  uint64_t alignment = 1;
};

// A named-data entry to lay out: its key, the index of its segment, and its
// layout (none when null). The key and the layout need only outlive the
// call.
struct KeyToPlace {
  std::string_view key;
  uint32_t segment = 0;
  const TensorLayout* layout = nullptr;
};

// A planned .ptd: the bytes before the segment data, and where each
// segment goes.
struct PtdLayout {
  std::vector<uint8_t> head;      // Header + FlatBuffer, unpadded.
  std::vector<uint64_t> offsets;  // Per segment, relative to the base.
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
};

// Lays out `segments` in order, each at the next multiple of lcm(
// `segment_alignment`, its alignment), and builds the FlatBuffer of them and
// of `keys` with the extended header spliced in. `segment_alignment` must be
// a power of two. InvalidArgument when the segment data passes 2^64 bytes or
// the FlatBuffer 2^31.
absl::StatusOr<PtdLayout> PlanPtdLayout(absl::Span<const SegmentToPlace> segments,
                                        absl::Span<const KeyToPlace> keys,
                                        uint64_t segment_alignment);

// Writes `n` zero bytes (the padding of a layout) in bounded chunks.
absl::Status WriteZeros(const WriteFn& write, uint64_t n);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_PTD_PTD_LAYOUT_H_
