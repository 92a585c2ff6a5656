// The extended-header codecs (runtime/ptd/ext_header.h): the .ptd "FH01"
// header (SPEC section 1) and the .pte "eh00" header (SPEC section 4), at the
// file offsets the SPEC gives.
#include "runtime/ptd/ext_header.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "runtime/internal/bytes_le.h"

namespace ptd::internal {
namespace {

TEST(ExtHeaderTest, PtdHeaderAtTheSpecOffsets) {
  std::vector<uint8_t> file(kPtdHeaderEnd, 0xEE);
  const PtdHeader h{.header_length = 40,
                    .flatbuffer_offset = 48,
                    .flatbuffer_size = 0x1122334455,
                    .segment_base_offset = 0x80,
                    .segment_data_size = 0xFFFFFFFFFFFFull};
  EncodePtdHeader(h, absl::MakeSpan(file));
  EXPECT_EQ(std::string(file.begin() + 8, file.begin() + 12), "FH01");
  EXPECT_EQ(LoadLE<uint32_t>(file.data() + 12), 40u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 16), 48u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 24), 0x1122334455u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 32), 0x80u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 40), 0xFFFFFFFFFFFFull);
  EXPECT_EQ(file[0], 0xEE);  // Bytes 0..8 belong to the FlatBuffer.
  const PtdHeader d = DecodePtdHeader(file);
  EXPECT_EQ(d.header_length, h.header_length);
  EXPECT_EQ(d.flatbuffer_offset, h.flatbuffer_offset);
  EXPECT_EQ(d.flatbuffer_size, h.flatbuffer_size);
  EXPECT_EQ(d.segment_base_offset, h.segment_base_offset);
  EXPECT_EQ(d.segment_data_size, h.segment_data_size);
}

TEST(ExtHeaderTest, PteHeaderWithAndWithoutDataSize) {
  std::vector<uint8_t> file(kPteHeaderEnd, 0);
  PteHeader h;
  h.header_length = 32;
  h.program_size = 1000;
  h.segment_base_offset = 1024;
  h.segment_data_size = 77;
  EncodePteHeader(h, absl::MakeSpan(file));
  EXPECT_EQ(std::string(file.begin() + 8, file.begin() + 12), "eh00");
  EXPECT_EQ(LoadLE<uint32_t>(file.data() + 12), 32u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 16), 1000u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 24), 1024u);
  EXPECT_EQ(LoadLE<uint64_t>(file.data() + 32), 77u);
  PteHeader d = DecodePteHeader(file);
  EXPECT_EQ(d.header_length, 32u);
  EXPECT_EQ(d.program_size, 1000u);
  EXPECT_EQ(d.segment_base_offset, 1024u);
  EXPECT_EQ(d.segment_data_size, 77u);

  // Length 24: no segment_data_size written or read.
  std::vector<uint8_t> short_file(kExtHeaderAt + kMinPteHeaderLength + 8, 0xAB);
  h.header_length = 24;
  EncodePteHeader(h, absl::MakeSpan(short_file));
  EXPECT_EQ(short_file[32], 0xAB);
  d = DecodePteHeader(short_file);
  EXPECT_EQ(d.header_length, 24u);
  EXPECT_FALSE(d.segment_data_size.has_value());
  // A 32-byte header in a buffer too short for the field: not read.
  d = DecodePteHeader(absl::MakeConstSpan(file.data(), kExtHeaderAt + kMinPteHeaderLength));
  EXPECT_FALSE(d.segment_data_size.has_value());
}

TEST(ExtHeaderTest, SpliceLeavesAGapAndMovesTheRoot) {
  const std::vector<uint8_t> fb = {12, 0, 0, 0, 'F', 'T', '0', '1', 1, 2, 3, 4};
  std::vector<uint8_t> out(fb.size() + 48, 0);
  SpliceFlatBuffer(fb, 48, absl::MakeSpan(out));
  EXPECT_EQ(LoadLE<uint32_t>(out.data()), 60u);
  EXPECT_EQ(std::string(out.begin() + 4, out.begin() + 8), "FT01");
  EXPECT_EQ(std::vector<uint8_t>(out.begin() + 56, out.end()), (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST(ExtHeaderTest, OneSetOfFlatBufferLimits) {
  EXPECT_EQ(kMaxFlatBufferSize, (uint64_t{1} << 31) - 1);
  EXPECT_EQ(kVerifierMaxDepth, 64u);
  EXPECT_EQ(kVerifierMaxTables, 1000000u);
}

}  // namespace
}  // namespace ptd::internal
