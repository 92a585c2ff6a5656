#include "tests/testing/pte_builder.h"

#include <algorithm>
#include <cstring>

#include "flatbuffers/flatbuffers.h"

#include "runtime/internal/bytes_le.h"
#include "runtime/internal/check.h"
#include "schema/program_generated.h"

namespace ptd::testing {
namespace {

namespace fb = ::ptd::pte_fb;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::vector<uint8_t> BuildPte(const PteSpec& spec) {
  PTD_CHECK(spec.header_length >= 24);
  PTD_CHECK(spec.segment_alignment > 0);

  // Segment placement relative to the base.
  std::vector<PteSegmentEntry> placed;
  uint64_t data_size = 0;
  for (const auto& seg : spec.segments) {
    const uint64_t offset = RoundUp(data_size, spec.segment_alignment);
    placed.push_back({offset, seg.size()});
    data_size = offset + seg.size();
  }
  const std::vector<PteSegmentEntry>& table =
      spec.segment_table.has_value() ? *spec.segment_table : placed;

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::ExecutionPlan>> plans;
  for (const PtePlanSpec& plan : spec.plans) {
    std::vector<flatbuffers::Offset<fb::BackendDelegate>> delegates;
    for (const PteDelegateSpec& d : plan.delegates) {
      flatbuffers::Offset<fb::BackendDelegateDataReference> ref = 0;
      if (d.has_processed) {
        ref = fb::CreateBackendDelegateDataReference(fbb, static_cast<fb::DataLocation>(d.location),
                                                     d.index);
      }
      delegates.push_back(fb::CreateBackendDelegate(fbb, fbb.CreateString(d.id), ref));
    }
    plans.push_back(fb::CreateExecutionPlanDirect(fbb, plan.name.c_str(), &delegates));
  }
  std::vector<flatbuffers::Offset<fb::BackendDelegateInlineData>> inline_data;
  for (const auto& data : spec.inline_data) {
    inline_data.push_back(
        fb::CreateBackendDelegateInlineDataDirect(fbb, data.has_value() ? &*data : nullptr));
  }
  std::vector<flatbuffers::Offset<fb::DataSegment>> segments;
  for (const PteSegmentEntry& e : table) {
    segments.push_back(fb::CreateDataSegment(fbb, e.offset, e.size));
  }
  std::vector<flatbuffers::Offset<fb::NamedData>> named;
  for (const auto& [key, index] : spec.named_data) {
    named.push_back(fb::CreateNamedDataDirect(fbb, key.c_str(), index));
  }
  const auto root =
      fb::CreateProgramDirect(fbb, /*version=*/0, &plans, &inline_data, &segments, &named);
  fb::FinishProgramBuffer(fbb, root);
  const uint8_t* fb_data = fbb.GetBufferPointer();
  const size_t fb_size = fbb.GetSize();

  // Splice the header after the first 8 bytes, padded so the FlatBuffer's
  // alignment is kept, and move the root offset past it.
  const uint64_t block =
      RoundUp(spec.header_length, std::max<uint64_t>(16, fbb.GetBufferMinAlignment()));
  const uint64_t program_size = fb_size + block;
  const uint64_t base = RoundUp(program_size, spec.segment_alignment);
  std::vector<uint8_t> out(base + data_size, 0);
  internal::SpliceFlatBuffer(absl::MakeConstSpan(fb_data, fb_size), static_cast<uint32_t>(block),
                             absl::MakeSpan(out));
  PteHeader header;
  header.header_length = spec.header_length;
  header.program_size = program_size;
  header.segment_base_offset = base;
  header.segment_data_size = data_size;
  internal::EncodePteHeader(header, absl::MakeSpan(out));
  for (size_t i = 0; i < spec.segments.size(); ++i) {
    if (spec.segments[i].empty()) continue;
    std::memcpy(out.data() + base + placed[i].offset, spec.segments[i].data(),
                spec.segments[i].size());
  }
  return out;
}

std::vector<uint8_t> ToBytes(std::string_view s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace ptd::testing
