#include "runtime/ptd/ext_header.h"

#include <cstring>

#include "flatbuffers/flatbuffers.h"

#include "runtime/internal/bytes_le.h"
#include "runtime/internal/check.h"

namespace ptd::internal {

static_assert(kMaxFlatBufferSize == FLATBUFFERS_MAX_BUFFER_SIZE,
              "the H4/P1 limit is FlatBuffers' own");
static_assert(kPtdHeaderEnd == kExtHeaderAt + kPtdHeaderLength);

void EncodePtdHeader(const PtdHeader& h, absl::Span<uint8_t> file) {
  PTD_CHECK(file.size() >= kPtdHeaderEnd);
  uint8_t* p = file.data();
  std::memcpy(p + kExtHeaderAt, kPtdHeaderMagic.data(), kPtdHeaderMagic.size());
  StoreLE<uint32_t>(p + kPtdHeaderLengthAt, h.header_length);
  StoreLE<uint64_t>(p + kPtdFlatbufferOffsetAt, h.flatbuffer_offset);
  StoreLE<uint64_t>(p + kPtdFlatbufferSizeAt, h.flatbuffer_size);
  StoreLE<uint64_t>(p + kPtdSegmentBaseAt, h.segment_base_offset);
  StoreLE<uint64_t>(p + kPtdSegmentDataSizeAt, h.segment_data_size);
}

PtdHeader DecodePtdHeader(absl::Span<const uint8_t> file) {
  PTD_CHECK(file.size() >= kPtdHeaderEnd);
  const uint8_t* p = file.data();
  PtdHeader h;
  h.header_length = LoadLE<uint32_t>(p + kPtdHeaderLengthAt);
  h.flatbuffer_offset = LoadLE<uint64_t>(p + kPtdFlatbufferOffsetAt);
  h.flatbuffer_size = LoadLE<uint64_t>(p + kPtdFlatbufferSizeAt);
  h.segment_base_offset = LoadLE<uint64_t>(p + kPtdSegmentBaseAt);
  h.segment_data_size = LoadLE<uint64_t>(p + kPtdSegmentDataSizeAt);
  return h;
}

void EncodePteHeader(const PteHeader& h, absl::Span<uint8_t> file) {
  PTD_CHECK(h.header_length >= kMinPteHeaderLength);
  const bool with_data_size = h.header_length >= kPteHeaderLengthWithDataSize;
  PTD_CHECK(file.size() >= (with_data_size ? kPteHeaderEnd : kExtHeaderAt + kMinPteHeaderLength));
  uint8_t* p = file.data();
  std::memcpy(p + kExtHeaderAt, kPteHeaderMagic.data(), kPteHeaderMagic.size());
  StoreLE<uint32_t>(p + kPteHeaderLengthAt, h.header_length);
  StoreLE<uint64_t>(p + kPteProgramSizeAt, h.program_size);
  StoreLE<uint64_t>(p + kPteSegmentBaseAt, h.segment_base_offset);
  if (with_data_size) {
    StoreLE<uint64_t>(p + kPteSegmentDataSizeAt, h.segment_data_size.value_or(0));
  }
}

PteHeader DecodePteHeader(absl::Span<const uint8_t> file) {
  PTD_CHECK(file.size() >= kExtHeaderAt + kMinPteHeaderLength);
  const uint8_t* p = file.data();
  PteHeader h;
  h.header_length = LoadLE<uint32_t>(p + kPteHeaderLengthAt);
  h.program_size = LoadLE<uint64_t>(p + kPteProgramSizeAt);
  h.segment_base_offset = LoadLE<uint64_t>(p + kPteSegmentBaseAt);
  if (h.header_length >= kPteHeaderLengthWithDataSize && file.size() >= kPteHeaderEnd) {
    h.segment_data_size = LoadLE<uint64_t>(p + kPteSegmentDataSizeAt);
  }
  return h;
}

void SpliceFlatBuffer(absl::Span<const uint8_t> fb, uint32_t block, absl::Span<uint8_t> out) {
  PTD_CHECK(fb.size() >= kExtHeaderAt);
  PTD_CHECK(out.size() >= fb.size() + block);
  StoreLE<uint32_t>(out.data(), LoadLE<uint32_t>(fb.data()) + block);
  std::memcpy(out.data() + 4, fb.data() + 4, 4);  // File identifier.
  std::memcpy(out.data() + kExtHeaderAt + block, fb.data() + kExtHeaderAt,
              fb.size() - kExtHeaderAt);
}

}  // namespace ptd::internal
