#include "ptd/ptd_writer.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "flatbuffers/flatbuffers.h"

#include "runtime/internal/bytes_le.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"
#include "runtime/ptd/ext_header.h"
#include "runtime/ptd/ptd_layout.h"
#include "runtime/ptd/tensor_layout_check.h"
#include "schema/flat_tensor_generated.h"

namespace ptd {
namespace {

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

bool SameLayout(const std::optional<TensorLayout>& a, const std::optional<TensorLayout>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->scalar_type == b->scalar_type && a->sizes == b->sizes && a->dim_order == b->dim_order;
}

}  // namespace

namespace internal {

absl::Status WriteZeros(const WriteFn& write, uint64_t n) {
  static constexpr uint8_t kZeros[4096] = {};
  while (n > 0) {
    const uint64_t chunk = std::min<uint64_t>(n, sizeof(kZeros));
    PTD_RETURN_IF_ERROR(write(absl::MakeConstSpan(kZeros, chunk)));
    n -= chunk;
  }
  return absl::OkStatus();
}

absl::StatusOr<PtdLayout> PlanPtdLayout(absl::Span<const SegmentToPlace> segments,
                                        absl::Span<const KeyToPlace> keys,
                                        uint64_t segment_alignment) {
  PtdLayout plan;
  // Segment placement, relative to the base.
  uint64_t end = 0;
  plan.offsets.reserve(segments.size());
  for (const SegmentToPlace& s : segments) {
    const uint64_t align = std::lcm(segment_alignment, s.alignment);
    const auto offset = AlignUp(end, align);
    const auto next = offset ? CheckedAdd(*offset, s.size) : std::nullopt;
    if (!next) return absl::InvalidArgumentError("segment data exceeds 2^64 bytes");
    plan.offsets.push_back(*offset);
    end = *next;
  }
  plan.segment_data_size = end;

  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<fb::DataSegment>> segment_tables;
  segment_tables.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    segment_tables.push_back(fb::CreateDataSegment(fbb, plan.offsets[i], segments[i].size));
  }
  std::vector<flatbuffers::Offset<fb::NamedData>> named;
  named.reserve(keys.size());
  for (const KeyToPlace& k : keys) {
    flatbuffers::Offset<fb::TensorLayout> layout = 0;
    if (k.layout) {
      layout = fb::CreateTensorLayout(fbb, static_cast<fb::ScalarType>(k.layout->scalar_type),
                                      fbb.CreateVector(k.layout->sizes),
                                      fbb.CreateVector(k.layout->dim_order));
    }
    named.push_back(fb::CreateNamedData(fbb, fbb.CreateString(k.key), k.segment, layout));
  }
  auto root = fb::CreateFlatTensor(fbb, kPtdVersion, fbb.CreateVector(segment_tables),
                                   fbb.CreateVector(named));
  fb::FinishFlatTensorBuffer(fbb, root);
  const uint8_t* buf = fbb.GetBufferPointer();
  const uint64_t fb_size = fbb.GetSize();
  if (kPtdHeaderBlockSize + fb_size > kMaxFlatBufferSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the FlatBuffer would be ", fb_size, " bytes, over 2^31"));
  }

  // Splice the header block in after the first 8 bytes.
  const uint64_t fb_end = kPtdHeaderBlockSize + fb_size;
  plan.segment_base_offset = *AlignUp(fb_end, segment_alignment);
  plan.head.assign(fb_end, 0);
  SpliceFlatBuffer(absl::MakeConstSpan(buf, fb_size), static_cast<uint32_t>(kPtdHeaderBlockSize),
                   absl::MakeSpan(plan.head));
  EncodePtdHeader(PtdHeader{.header_length = kPtdHeaderLength,
                            .flatbuffer_offset = kPtdHeaderBlockSize,
                            .flatbuffer_size = fb_size,
                            .segment_base_offset = plan.segment_base_offset,
                            .segment_data_size = plan.segment_data_size},
                  absl::MakeSpan(plan.head));
  return plan;
}

}  // namespace internal

PtdWriter::PtdWriter(PtdWriterOptions options) : options_(options) {}

absl::Status PtdWriter::Add(std::string key, absl::Span<const uint8_t> data, uint64_t alignment,
                            std::optional<TensorLayout> layout) {
  if (key.empty()) return absl::InvalidArgumentError("empty named-data key");
  if (!internal::IsValidUtf8(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", internal::Escaped(key), "' is not valid UTF-8"));
  }
  if (!IsPowerOfTwo(alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "': alignment ", alignment, " is not a power of two"));
  }
  if (layout) {
    Report report;
    CheckTensorLayout(*layout, key, 0, data.size(), Where{}, &report);
    if (!report.ok()) {
      return absl::InvalidArgumentError(report.errors().front().message);
    }
  }
  const std::string_view content(reinterpret_cast<const char*>(data.data()), data.size());
  if (auto it = key_index_.find(key); it != key_index_.end()) {
    const Entry& prev = entries_[it->second];
    const auto& bytes = buffers_[prev.buffer].bytes;
    const bool same_bytes =
        bytes.size() == data.size() && std::equal(bytes.begin(), bytes.end(), data.begin());
    if (same_bytes && SameLayout(prev.layout, layout)) {
      buffers_[prev.buffer].alignment = std::lcm(buffers_[prev.buffer].alignment, alignment);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "' was already added with other bytes or layout"));
  }

  // Identical bytes are stored once.
  const size_t hash = absl::HashOf(content);
  std::vector<uint32_t>& candidates = content_index_[hash];
  std::optional<uint32_t> buffer;
  for (uint32_t b : candidates) {
    const auto& bytes = buffers_[b].bytes;
    if (bytes.size() == data.size() && std::equal(bytes.begin(), bytes.end(), data.begin())) {
      buffer = b;
      break;
    }
  }
  if (buffer) {
    buffers_[*buffer].alignment = std::lcm(buffers_[*buffer].alignment, alignment);
  } else {
    buffer = static_cast<uint32_t>(buffers_.size());
    buffers_.push_back(Buffer{.bytes = {data.begin(), data.end()}, .alignment = alignment});
    candidates.push_back(*buffer);
  }
  key_index_.emplace(key, static_cast<uint32_t>(entries_.size()));
  entries_.push_back(Entry{.key = std::move(key), .buffer = *buffer, .layout = std::move(layout)});
  return absl::OkStatus();
}

absl::StatusOr<internal::PtdLayout> PtdWriter::MakePlan() const {
  if (!IsPowerOfTwo(options_.segment_alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment alignment ", options_.segment_alignment, " is not a power of two"));
  }
  std::vector<internal::SegmentToPlace> segments;
  segments.reserve(buffers_.size());
  for (const Buffer& b : buffers_) {
    segments.push_back({.size = b.bytes.size(), .alignment = b.alignment});
  }
  std::vector<internal::KeyToPlace> keys;
  keys.reserve(entries_.size());
  for (const Entry& e : entries_) {
    keys.push_back({.key = e.key, .segment = e.buffer, .layout = e.layout ? &*e.layout : nullptr});
  }
  return internal::PlanPtdLayout(segments, keys, options_.segment_alignment);
}

absl::Status PtdWriter::Emit(const internal::PtdLayout& plan, const WriteFn& write) const {
  PTD_RETURN_IF_ERROR(write(plan.head));
  PTD_RETURN_IF_ERROR(internal::WriteZeros(write, plan.segment_base_offset - plan.head.size()));
  uint64_t pos = 0;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    PTD_RETURN_IF_ERROR(internal::WriteZeros(write, plan.offsets[i] - pos));
    PTD_RETURN_IF_ERROR(write(buffers_[i].bytes));
    pos = plan.offsets[i] + buffers_[i].bytes.size();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> PtdWriter::Serialize() const {
  PTD_ASSIGN_OR_RETURN(internal::PtdLayout plan, MakePlan());
  std::vector<uint8_t> out;
  out.reserve(plan.segment_base_offset + plan.segment_data_size);
  PTD_RETURN_IF_ERROR(Emit(plan, [&](absl::Span<const uint8_t> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
    return absl::OkStatus();
  }));
  return out;
}

absl::Status PtdWriter::Write(const std::string& path) const {
  PTD_ASSIGN_OR_RETURN(internal::PtdLayout plan, MakePlan());
  return WriteFileAtomically(path, [&](const WriteFn& write) { return Emit(plan, write); });
}

}  // namespace ptd
