#include "ptd/program.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flatbuffers/flatbuffers.h"

#include "ptd/manifest.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/check.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/strings.h"
#include "runtime/ptd/ext_header.h"
#include "schema/program_generated.h"

namespace ptd {
namespace {

namespace fb = ::ptd::pte_fb;

constexpr uint64_t kHeaderOffset = internal::kExtHeaderAt;
constexpr absl::string_view kHeaderMagic(internal::kPteHeaderMagic.data(),
                                         internal::kPteHeaderMagic.size());
using internal::kMaxFlatBufferSize;
constexpr flatbuffers::uoffset_t kMaxDepth = internal::kVerifierMaxDepth;
constexpr flatbuffers::uoffset_t kMaxTables = internal::kVerifierMaxTables;

constexpr int kLocationInline = static_cast<int>(fb::DataLocation::INLINE);
constexpr int kLocationSegment = static_cast<int>(fb::DataLocation::SEGMENT);

// Where a diagnostic applies: the file, and the delegate or segment.
// (Built field by field: designated initializers that leave fields out trip
// -Wmissing-field-initializers on GCC 12.)
Where At(const std::string& file, std::optional<std::string> source = std::nullopt,
         std::optional<uint64_t> segment = std::nullopt) {
  Where w;
  w.file = file;
  w.segment = segment;
  w.source = std::move(source);
  return w;
}

std::string_view AsStringView(const flatbuffers::String* s) {
  return s == nullptr ? std::string_view() : s->string_view();
}

bool StartsWith(absl::Span<const uint8_t> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() &&
         std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

// P1: the FlatBuffer must be under FlatBuffers' 2^31-byte limit.
bool CheckProgramSize(uint64_t program_size, const std::string& path, Report* report) {
  if (program_size < kMaxFlatBufferSize) return true;
  report->Error(
      "P1", absl::StatusCode::kDataLoss,
      absl::StrCat("program_size ", program_size, " is not under the FlatBuffer limit of ",
                   kMaxFlatBufferSize, " bytes"),
      At(path));
  return false;
}

// Reads and checks the file identifier and the optional extended header
// (P1). nullopt after reporting when the program cannot be framed. Without
// "eh00" at bytes 8..12, the program is the whole file with no segments, as
// upstream's runtime reads it (executorch 1.5.1 writes such files).
std::optional<PteHeader> ReadHeader(const FileSource& source, Report* report) {
  const std::string& path = source.name();
  const uint64_t file_size = source.size();
  constexpr uint64_t kIdentifierEnd = 8;
  if (file_size < kIdentifierEnd) {
    report->Error("P1", absl::StatusCode::kDataLoss,
                  absl::StrCat("file is ", file_size,
                               " bytes, too small for a program (its FlatBuffer "
                               "identifier ends at byte ",
                               kIdentifierEnd, ")"),
                  At(path));
    return std::nullopt;
  }
  std::array<uint8_t, internal::kPteHeaderEnd> raw{};
  const uint64_t to_read = std::min<uint64_t>(raw.size(), file_size);
  if (absl::Status s = source.ReadAt(0, absl::MakeSpan(raw.data(), to_read)); !s.ok()) {
    report->Error("P1", s.code(), absl::StrCat("cannot read the extended header: ", s.message()),
                  At(path));
    return std::nullopt;
  }

  bool ok = true;
  const std::string_view identifier(
      reinterpret_cast<const char*>(raw.data() + internal::kFileIdentifierAt),
      internal::kPteFileIdentifier.size());
  if (identifier != internal::kPteFileIdentifier) {
    report->Error(
        "P1", absl::StatusCode::kDataLoss,
        absl::StrCat("FlatBuffer identifier at bytes 4..8 is '", internal::Escaped(identifier),
                     "', expected '", internal::Sv(internal::kPteFileIdentifier), "'"),
        At(path));
    ok = false;
  }
  if (to_read < kHeaderOffset + kHeaderMagic.size() ||
      std::memcmp(raw.data() + kHeaderOffset, kHeaderMagic.data(), 4) != 0) {
    // No extended header: the FlatBuffer is the whole file.
    if (!ok || !CheckProgramSize(file_size, path, report)) return std::nullopt;
    PteHeader h;
    h.present = false;
    h.program_size = file_size;
    return h;
  }
  const uint64_t min_size = kHeaderOffset + kMinPteHeaderLength;
  if (file_size < min_size) {
    report->Error("P1", absl::StatusCode::kDataLoss,
                  absl::StrCat("file is ", file_size,
                               " bytes, too small for a program with an "
                               "extended header (at least ",
                               min_size, " bytes)"),
                  At(path));
    return std::nullopt;
  }

  PteHeader h = internal::DecodePteHeader(absl::MakeConstSpan(raw.data(), to_read));
  if (h.header_length < kMinPteHeaderLength) {
    report->Error("P1", absl::StatusCode::kDataLoss,
                  absl::StrCat("extended header length is ", h.header_length,
                               ", less than the minimum ", kMinPteHeaderLength),
                  At(path));
    return std::nullopt;
  }
  if (!internal::RangeInside(kHeaderOffset, h.header_length, file_size)) {
    report->Error(
        "P1", absl::StatusCode::kDataLoss,
        absl::StrCat("extended header length ", h.header_length, " at offset ", kHeaderOffset,
                     " runs past the end of the ", file_size, "-byte file"),
        At(path));
    return std::nullopt;
  }
  if (h.program_size > file_size) {
    report->Error("P1", absl::StatusCode::kDataLoss,
                  absl::StrCat("program_size ", h.program_size, " is past the end of the ",
                               file_size, "-byte file"),
                  At(path));
    ok = false;
  } else if (!CheckProgramSize(h.program_size, path, report)) {
    ok = false;
  }
  if (!ok) return std::nullopt;
  return h;
}

// A CUDA payload found in the FlatBuffer: an absolute byte range of the file
// (inline data lies inside [0, program_size), segments after it).
struct PendingPayload {
  CudaDelegate delegate;  // Everything but the payload.
  uint64_t offset = 0;
  uint64_t size = 0;
};

}  // namespace

namespace {

using SegmentTable = flatbuffers::Vector<flatbuffers::Offset<fb::DataSegment>>;

// P1: every segment lies inside the file. Returns, per segment, whether it
// does.
std::vector<bool> CheckSegments(const SegmentTable* segments, const PteHeader& header,
                                uint64_t file_size, const std::string& path, Report* report) {
  const uint32_t num_segments = segments == nullptr ? 0 : segments->size();
  std::vector<bool> segment_ok(num_segments, false);
  // Without an extended header there is no segment data: a delegate that
  // refers to a segment is P2 (LocatePayload).
  if (!header.present) return segment_ok;
  for (uint32_t i = 0; i < num_segments; ++i) {
    const fb::DataSegment* seg = segments->Get(i);
    const std::optional<uint64_t> start =
        internal::CheckedAdd(header.segment_base_offset, seg->offset());
    if (!start.has_value() || !internal::CheckedAdd(*start, seg->size()).has_value()) {
      report->Error(
          "P1", absl::StatusCode::kDataLoss,
          absl::StrCat("segment ", i, ": segment_base_offset ", header.segment_base_offset,
                       " + offset ", seg->offset(), " + size ", seg->size(), " overflows 64 bits"),
          At(path, std::nullopt, i));
    } else if (!internal::RangeInside(*start, seg->size(), file_size)) {
      report->Error("P1", absl::StatusCode::kDataLoss,
                    absl::StrCat("segment ", i, ": bytes [", *start, ", ", *start + seg->size(),
                                 ") (segment_base_offset ", header.segment_base_offset,
                                 " + offset ", seg->offset(), ", size ", seg->size(),
                                 ") are past the end of the ", file_size, "-byte file"),
                    At(path, std::nullopt, i));
    } else {
      segment_ok[i] = true;
    }
  }
  return segment_ok;
}

// What P2 needs to know about the program to find a payload.
struct PayloadContext {
  const fb::Program* program;
  absl::Span<const uint8_t> fb_span;  // The FlatBuffer's bytes.
  const std::vector<bool>& segment_ok;
  const PteHeader& header;
  uint64_t file_size;
  const std::string& path;
};

// P2 for one CUDA delegate: where its processed bytes lie in the file, or
// false (reported) when they are missing.
bool LocatePayload(const fb::BackendDelegate& delegate, const PayloadContext& ctx,
                   PendingPayload* p, Report* report) {
  const auto* inline_data = ctx.program->backend_delegate_data();
  const uint32_t num_inline = inline_data == nullptr ? 0 : inline_data->size();
  const auto* segments = ctx.program->segments();
  const uint32_t num_segments = static_cast<uint32_t>(ctx.segment_ok.size());
  const std::string place =
      absl::StrCat("method '", p->delegate.method, "' delegate ", p->delegate.delegate_index, ": ");
  const Where where = At(ctx.path, p->delegate.source);
  auto missing = [&](std::string what) {
    report->Error("P2", absl::StatusCode::kDataLoss, absl::StrCat(place, what), where);
    return false;
  };
  const fb::BackendDelegateDataReference* ref = delegate.processed();
  if (ref == nullptr) return missing("has no processed data reference");
  const int location = static_cast<int>(ref->location());
  const uint32_t index = ref->index();
  if (location == kLocationInline) {
    if (index >= num_inline) {
      return missing(
          absl::StrCat("inline data ", index, " is out of range (", num_inline, " entries)"));
    }
    const auto* data = inline_data->Get(index)->data();
    if (data == nullptr || data->size() == 0) {
      return missing(
          absl::StrCat("inline data ", index, data == nullptr ? " has no data" : " is empty"));
    }
    // Verified to lie inside the FlatBuffer, hence inside the file.
    p->offset = static_cast<uint64_t>(data->data() - ctx.fb_span.data());
    p->size = data->size();
    return true;
  }
  if (location == kLocationSegment) {
    if (index >= num_segments) {
      return missing(
          absl::StrCat("segment ", index, " is out of range (", num_segments, " segments)"));
    }
    const fb::DataSegment* seg = segments->Get(index);
    if (!ctx.header.present) {
      return missing(absl::StrCat("segment ", index,
                                  " is referenced, but the program has no extended "
                                  "header ('",
                                  kHeaderMagic, "' at bytes 8..12), so no segment data"));
    }
    if (!ctx.segment_ok[index]) {
      report->Error("P2", absl::StatusCode::kDataLoss,
                    absl::StrCat(place, "segment ", index, " (offset ", seg->offset(), ", size ",
                                 seg->size(), ") is not inside the ", ctx.file_size, "-byte file"),
                    At(ctx.path, p->delegate.source, index));
      return false;
    }
    if (seg->size() == 0) return missing(absl::StrCat("segment ", index, " is empty"));
    p->offset = ctx.header.segment_base_offset + seg->offset();
    p->size = seg->size();
    return true;
  }
  return missing(absl::StrCat("unknown processed data location ", location, " (expected ",
                              kLocationInline, " INLINE or ", kLocationSegment, " SEGMENT)"));
}

// P2 over every CUDA delegate of every plan, and P4 when there is none.
std::vector<PendingPayload> FindCudaPayloads(const PayloadContext& ctx, Report* report) {
  std::vector<PendingPayload> pending;
  uint64_t num_cuda = 0;
  if (const auto* plans = ctx.program->execution_plan(); plans != nullptr) {
    for (const fb::ExecutionPlan* plan : *plans) {
      const auto* delegates = plan->delegates();
      if (delegates == nullptr) continue;
      const std::string method(AsStringView(plan->name()));
      for (uint32_t d = 0; d < delegates->size(); ++d) {
        const fb::BackendDelegate* delegate = delegates->Get(d);
        if (AsStringView(delegate->id()) != kCudaBackendId) continue;
        ++num_cuda;
        PendingPayload p;
        p.delegate.method = method;
        p.delegate.delegate_index = d;
        p.delegate.source = absl::StrCat("pte:", method, ":", d);
        if (LocatePayload(*delegate, ctx, &p, report)) pending.push_back(std::move(p));
      }
    }
  }
  if (num_cuda == 0) {
    report->Warning(
        "P4", absl::StrCat("program has no CUDA delegate ('", internal::Sv(kCudaBackendId), "')"),
        At(ctx.path));
  }
  return pending;
}

// The payload bytes: views where the source has them; otherwise one copy of
// the range covering every payload, read once into `region`. Returns the
// delegates (none when that read fails, reported as P2), each marked manifest
// or legacy (P4).
std::vector<CudaDelegate> AttachPayloads(std::vector<PendingPayload> pending,
                                         const FileSource& source, Bytes* region, Report* report) {
  const std::string& path = source.name();
  bool all_views = true;
  uint64_t lo = source.size();
  uint64_t hi = 0;
  for (const PendingPayload& p : pending) {
    lo = std::min(lo, p.offset);
    hi = std::max(hi, p.offset + p.size);
    if (all_views && !source.View(p.offset, p.size).has_value()) all_views = false;
  }
  if (!all_views) {
    absl::StatusOr<Bytes> read = ReadBytes(source, lo, hi - lo);
    if (!read.ok()) {
      report->Error("P2", read.status().code(),
                    absl::StrCat("cannot read the CUDA payloads in bytes [", lo, ", ", hi,
                                 "): ", read.status().message()),
                    At(path));
      return {};
    }
    *region = *std::move(read);
  }
  std::vector<CudaDelegate> delegates;
  delegates.reserve(pending.size());
  for (PendingPayload& p : pending) {
    CudaDelegate& delegate = delegates.emplace_back(std::move(p.delegate));
    if (all_views) {
      delegate.payload = Bytes::Borrowed(*source.View(p.offset, p.size));
    } else {
      delegate.payload = Bytes::Borrowed(region->span().subspan(p.offset - lo, p.size));
    }
    delegate.is_manifest = StartsWith(delegate.payload.span(), kManifestMagicPrefix);
    if (!delegate.is_manifest) {
      report->Warning(
          "P4",
          absl::StrCat("method '", delegate.method, "' delegate ", delegate.delegate_index,
                       ": the ", delegate.payload.size(),
                       "-byte CUDA payload does not start with '",
                       internal::Sv(kManifestMagicPrefix), "' (legacy payload), not verified"),
          At(path, delegate.source));
    }
  }
  return delegates;
}

}  // namespace

std::unique_ptr<Program> Program::Verify(std::shared_ptr<const FileSource> source, Report* report) {
  PTD_CHECK(source != nullptr);
  PTD_CHECK(report != nullptr);
  const std::string& path = source->name();
  const uint64_t file_size = source->size();

  std::optional<PteHeader> header = ReadHeader(*source, report);
  if (!header.has_value()) return nullptr;

  // The FlatBuffer: a view of a mapping, or a copy for pread.
  absl::StatusOr<Bytes> fb_bytes = ReadBytes(*source, 0, header->program_size);
  if (!fb_bytes.ok()) {
    report->Error("P1", fb_bytes.status().code(),
                  absl::StrCat("cannot read the ", header->program_size,
                               "-byte FlatBuffer: ", fb_bytes.status().message()),
                  At(path));
    return nullptr;
  }
  const absl::Span<const uint8_t> fb_span = fb_bytes->span();
  flatbuffers::Verifier verifier(fb_span.data(), fb_span.size(), kMaxDepth, kMaxTables,
                                 /*check_alignment=*/true);
  if (!fb::VerifyProgramBuffer(verifier)) {
    report->Error("P1", absl::StatusCode::kDataLoss,
                  absl::StrCat("the ", header->program_size,
                               "-byte program FlatBuffer fails the FlatBuffers "
                               "verifier (depth <= ",
                               kMaxDepth, ", tables <= ", kMaxTables, ", alignment checked)"),
                  At(path));
    return nullptr;
  }
  const fb::Program* fb_program = fb::GetProgram(fb_span.data());

  std::unique_ptr<Program> program(new Program(source));
  program->header_ = *header;

  // P1: every segment lies inside the file.
  const std::vector<bool> segment_ok =
      CheckSegments(fb_program->segments(), *header, file_size, path, report);

  if (const auto* named = fb_program->named_data(); named != nullptr) {
    program->named_data_keys_.reserve(named->size());
    for (const fb::NamedData* nd : *named) {
      if (nd->key() != nullptr) program->named_data_keys_.emplace_back(nd->key()->str());
    }
  }

  // P2: find every CUDA delegate's payload; P4 for legacy payloads.
  const PayloadContext ctx{.program = fb_program,
                           .fb_span = fb_span,
                           .segment_ok = segment_ok,
                           .header = *header,
                           .file_size = file_size,
                           .path = path};
  program->delegates_ =
      AttachPayloads(FindCudaPayloads(ctx, report), *source, &program->payload_region_, report);
  return program;
}

absl::StatusOr<std::unique_ptr<Program>> Program::Open(std::shared_ptr<const FileSource> source) {
  Report report;
  std::unique_ptr<Program> program = Verify(std::move(source), &report);
  if (!report.ok()) return report.FirstError();
  PTD_CHECK(program != nullptr);  // Verify returns nullptr only with errors.
  return program;
}

}  // namespace ptd
