// The on-disk extended headers: one encode/decode pair per header, shared by
// the readers, the writer and the test builders, and the one set of
// FlatBuffers limits every reader verifies with.
//
// Both formats splice their extended header into a FlatBuffer after its first
// 8 bytes (root offset and file identifier), so the fields below are file
// offsets. The codecs convert bytes and fields only; the readers check the
// values (H2-H4, P1) and word the diagnostics.
#ifndef PTD_RUNTIME_PTD_EXT_HEADER_H_
#define PTD_RUNTIME_PTD_EXT_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

#include "ptd/container.h"
#include "ptd/program.h"

namespace ptd::internal {

// FlatBuffers' offsets are 32-bit: its verifier handles buffers strictly
// smaller than this (it asserts otherwise), so readers check first (H4, P1).
inline constexpr uint64_t kMaxFlatBufferSize = (uint64_t{1} << 31) - 1;
inline constexpr uint32_t kVerifierMaxDepth = 64;        // C1, P1.
inline constexpr uint32_t kVerifierMaxTables = 1000000;  // C1, P1.

// The FlatBuffer file identifier (bytes 4..8) of each format: the one
// spelling of each for the readers, the writer and the sniffer.
inline constexpr size_t kFileIdentifierAt = 4;
inline constexpr std::string_view kPtdFileIdentifier = "FT01";  // FlatTensor.
inline constexpr std::string_view kPteFileIdentifier = "ET12";  // ExecuTorch program.

// Where the extended header starts in both formats.
inline constexpr size_t kExtHeaderAt = 8;

// .ptd ("FH01", SPEC section 1).
inline constexpr std::string_view kPtdHeaderMagic = "FH01";
inline constexpr size_t kPtdHeaderLengthAt = 12;
inline constexpr size_t kPtdFlatbufferOffsetAt = 16;
inline constexpr size_t kPtdFlatbufferSizeAt = 24;
inline constexpr size_t kPtdSegmentBaseAt = 32;
inline constexpr size_t kPtdSegmentDataSizeAt = 40;
inline constexpr size_t kPtdHeaderEnd = 48;  // Bytes a decoder needs.

// Writes the magic and every field of `h` into bytes [8, 48) of `file`.
// REQUIRES: file.size() >= kPtdHeaderEnd.
void EncodePtdHeader(const PtdHeader& h, absl::Span<uint8_t> file);
// The fields of bytes [8, 48) of `file`; the magic is not checked.
// REQUIRES: file.size() >= kPtdHeaderEnd.
PtdHeader DecodePtdHeader(absl::Span<const uint8_t> file);

// .pte ("eh00", SPEC section 4).
inline constexpr std::string_view kPteHeaderMagic = "eh00";
inline constexpr size_t kPteHeaderLengthAt = 12;
inline constexpr size_t kPteProgramSizeAt = 16;
inline constexpr size_t kPteSegmentBaseAt = 24;
inline constexpr size_t kPteSegmentDataSizeAt = 32;
// Header length from which segment_data_size is present.
inline constexpr uint32_t kPteHeaderLengthWithDataSize = 32;
inline constexpr size_t kPteHeaderEnd = kExtHeaderAt + kPteHeaderLengthWithDataSize;

// Writes the magic and the fields of `h` into `file` from byte 8 on;
// segment_data_size only when h.header_length >= 32 (0 when unset).
// REQUIRES: file.size() >= 8 + min(h.header_length, 32), and
// h.header_length >= kMinPteHeaderLength.
void EncodePteHeader(const PteHeader& h, absl::Span<uint8_t> file);
// The fields from byte 8 on; segment_data_size when the header length is
// >= 32 and `file` holds it. The magic is not checked.
// REQUIRES: file.size() >= 8 + kMinPteHeaderLength.
PteHeader DecodePteHeader(absl::Span<const uint8_t> file);

// Copies the finished FlatBuffer `fb` into `out` with a `block`-byte gap
// after its first 8 bytes (where the extended header goes), and moves its
// root offset past the gap. REQUIRES: fb.size() >= 8 and
// out.size() >= fb.size() + block.
void SpliceFlatBuffer(absl::Span<const uint8_t> fb, uint32_t block, absl::Span<uint8_t> out);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_PTD_EXT_HEADER_H_
