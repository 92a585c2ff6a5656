#include "tests/testing/raw_ptd.h"

#include <cstring>

#include "flatbuffers/flatbuffers.h"

#include "schema/flat_tensor_generated.h"

namespace ptd::testing {

std::vector<uint8_t> BuildRawPtd(const RawPtd& spec) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::DataSegment>>> segs = 0;
  if (spec.segments) {
    std::vector<flatbuffers::Offset<fb::DataSegment>> v;
    for (const RawSegment& s : *spec.segments) {
      v.push_back(fb::CreateDataSegment(fbb, s.offset, s.size));
    }
    segs = fbb.CreateVector(v);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::NamedData>>> named = 0;
  if (spec.named_data) {
    std::vector<flatbuffers::Offset<fb::NamedData>> v;
    for (const RawNamed& n : *spec.named_data) {
      flatbuffers::Offset<fb::TensorLayout> layout = 0;
      if (n.layout) {
        auto sizes = n.layout->sizes ? fbb.CreateVector(*n.layout->sizes)
                                     : flatbuffers::Offset<flatbuffers::Vector<int32_t>>();
        auto order = n.layout->dim_order ? fbb.CreateVector(*n.layout->dim_order)
                                         : flatbuffers::Offset<flatbuffers::Vector<uint8_t>>();
        layout = fb::CreateTensorLayout(fbb, static_cast<fb::ScalarType>(n.layout->scalar_type),
                                        sizes, order);
      }
      auto key = n.key ? fbb.CreateString(*n.key) : flatbuffers::Offset<flatbuffers::String>();
      v.push_back(fb::CreateNamedData(fbb, key, n.segment_index, layout));
    }
    named = fbb.CreateVector(v);
  }
  fb::FinishFlatTensorBuffer(fbb, fb::CreateFlatTensor(fbb, spec.version, segs, named));
  const uint8_t* buf = fbb.GetBufferPointer();
  const uint64_t fb_size = fbb.GetSize();
  const uint64_t fb_end = kPtdHeaderBlockSize + fb_size;
  const uint64_t base =
      (fb_end + spec.segment_alignment - 1) / spec.segment_alignment * spec.segment_alignment;
  std::vector<uint8_t> out(base + spec.data.size(), 0);
  internal::SpliceFlatBuffer(absl::MakeConstSpan(buf, fb_size),
                             static_cast<uint32_t>(kPtdHeaderBlockSize), absl::MakeSpan(out));
  internal::EncodePtdHeader(PtdHeader{.header_length = kPtdHeaderLength,
                                      .flatbuffer_offset = kPtdHeaderBlockSize,
                                      .flatbuffer_size = fb_size,
                                      .segment_base_offset = base,
                                      .segment_data_size = spec.data.size()},
                            absl::MakeSpan(out));
  if (!spec.data.empty()) std::memcpy(out.data() + base, spec.data.data(), spec.data.size());
  return out;
}

RawPtd ValidRawPtd() {
  RawPtd p;
  p.segments = std::vector<RawSegment>{{0, 24}, {128, 16}};
  p.named_data = std::vector<RawNamed>{
      {"a", 0, RawLayout{6, std::vector<int32_t>{2, 3}, std::vector<uint8_t>{0, 1}}},
      {"b", 1, std::nullopt},
      {"c", 0, std::nullopt},
  };
  p.data.assign(144, 0);
  for (size_t i = 0; i < 24; ++i) p.data[i] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < 16; ++i) p.data[128 + i] = static_cast<uint8_t>(0xA0 + i);
  return p;
}

}  // namespace ptd::testing
