#include "ptd/container.h"

#include <algorithm>
#include <bit>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "flatbuffers/flatbuffers.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"
#include "runtime/ptd/ext_header.h"
#include "runtime/ptd/tensor_layout_check.h"
#include "schema/flat_tensor_generated.h"

namespace ptd {
namespace {

constexpr absl::StatusCode kDataLoss = absl::StatusCode::kDataLoss;

// Checks H1-H4 and reports H5. Returns false when the FlatBuffer region
// cannot be read (so nothing else can be checked). `data_in_file` is set
// false when the data region runs past the end of the file (H4): the
// FlatBuffer can still be checked, but segments past the end cannot be read.
bool CheckHeader(const FileSource& source, Report* report, PtdHeader* h, bool* data_in_file) {
  const std::string& file = source.name();
  const Where where{.file = file};
  const uint64_t size = source.size();
  *data_in_file = true;
  if (size < kMinPtdFileSize) {
    report->Error("H1", kDataLoss,
                  absl::StrCat("file is ", size, " bytes, shorter than the ", kMinPtdFileSize,
                               "-byte minimum"),
                  where);
    return false;
  }
  uint8_t raw[internal::kPtdHeaderEnd];
  if (absl::Status s = source.ReadAt(0, absl::MakeSpan(raw)); !s.ok()) {
    report->Error("H1", s.code(), std::string(s.message()), where);
    return false;
  }
  const std::string_view fb_id(reinterpret_cast<const char*>(raw + internal::kFileIdentifierAt),
                               internal::kPtdFileIdentifier.size());
  const std::string_view eh_magic(reinterpret_cast<const char*>(raw + internal::kExtHeaderAt),
                                  internal::kPtdHeaderMagic.size());
  if (fb_id != internal::kPtdFileIdentifier || eh_magic != internal::kPtdHeaderMagic) {
    report->Error("H2", kDataLoss,
                  absl::StrCat("bad magic: bytes 4..12 are '", internal::Escaped(fb_id), "' '",
                               internal::Escaped(eh_magic), "', expected '",
                               internal::Sv(internal::kPtdFileIdentifier), "' '",
                               internal::Sv(internal::kPtdHeaderMagic), "'"),
                  where);
    return false;
  }
  *h = internal::DecodePtdHeader(raw);

  bool ok = true;
  if (h->header_length < kPtdHeaderLength) {
    report->Error(
        "H3", kDataLoss,
        absl::StrCat("header length ", h->header_length, " is less than ", kPtdHeaderLength),
        where);
    ok = false;
  } else if (h->header_length > h->flatbuffer_offset) {
    report->Error("H3", kDataLoss,
                  absl::StrCat("header length ", h->header_length, " exceeds flatbuffer_offset ",
                               h->flatbuffer_offset),
                  where);
    ok = false;
  }
  const auto fb_end = internal::CheckedAdd(h->flatbuffer_offset, h->flatbuffer_size);
  if (!fb_end) {
    report->Error("H4", kDataLoss,
                  absl::StrCat("flatbuffer_offset ", h->flatbuffer_offset, " + flatbuffer_size ",
                               h->flatbuffer_size, " overflows"),
                  where);
    return false;
  }
  if (*fb_end >= internal::kMaxFlatBufferSize) {
    report->Error(
        "H4", kDataLoss,
        absl::StrCat("FlatBuffer region is ", *fb_end, " bytes, at or over FlatBuffers' limit of ",
                     internal::kMaxFlatBufferSize, " (2^31 - 1)"),
        where);
    ok = false;
  }
  if (*fb_end > h->segment_base_offset) {
    report->Error("H4", kDataLoss,
                  absl::StrCat("FlatBuffer ends at ", *fb_end, ", after segment_base_offset ",
                               h->segment_base_offset),
                  where);
    ok = false;
  }
  if (*fb_end > size) {
    report->Error(
        "H4", kDataLoss,
        absl::StrCat("FlatBuffer ends at ", *fb_end, ", past the end of the ", size, "-byte file"),
        where);
    ok = false;
  }
  const auto data_end = internal::CheckedAdd(h->segment_base_offset, h->segment_data_size);
  if (!data_end) {
    report->Error("H4", kDataLoss,
                  absl::StrCat("segment_base_offset ", h->segment_base_offset,
                               " + segment_data_size ", h->segment_data_size, " overflows"),
                  where);
    *data_in_file = false;
  } else if (*data_end > size) {
    report->Error(
        "H4", kDataLoss,
        absl::StrCat("segment_base_offset ", h->segment_base_offset, " + segment_data_size ",
                     h->segment_data_size, " = ", *data_end, " exceeds the file size ", size),
        where);
    *data_in_file = false;
  } else if (*data_end < size) {
    report->Warning("H5",
                    absl::StrCat(size - *data_end,
                                 " trailing bytes after the data region, which "
                                 "ends at ",
                                 *data_end, " of ", size),
                    where);
  }
  return ok;
}

}  // namespace

void CheckTensorLayout(const TensorLayout& layout, std::string_view key, uint32_t segment_index,
                       std::optional<uint64_t> segment_size, const Where& where, Report* report) {
  const auto elem = ElementSize(layout.scalar_type);
  if (!elem) {
    report->Error(
        "C8", kDataLoss,
        absl::StrCat("key '", internal::Sv(key), "': unknown scalar type ", layout.scalar_type),
        where);
  }
  bool sizes_ok = true;
  for (size_t i = 0; i < layout.sizes.size(); ++i) {
    if (layout.sizes[i] < 0) {
      report->Error("C8", kDataLoss,
                    absl::StrCat("key '", internal::Sv(key), "': sizes[", i, "] is ",
                                 layout.sizes[i], ", negative"),
                    where);
      sizes_ok = false;
    }
  }
  if (layout.dim_order.size() != layout.sizes.size()) {
    report->Error(
        "C8", kDataLoss,
        absl::StrCat("key '", internal::Sv(key), "': dim_order has ", layout.dim_order.size(),
                     " entries, sizes has ", layout.sizes.size()),
        where);
  } else {
    std::vector<bool> seen(layout.dim_order.size(), false);
    for (size_t i = 0; i < layout.dim_order.size(); ++i) {
      const uint8_t d = layout.dim_order[i];
      if (d >= seen.size() || seen[d]) {
        report->Error("C8", kDataLoss,
                      absl::StrCat("key '", internal::Sv(key),
                                   "': dim_order is not a "
                                   "permutation of 0..",
                                   seen.size() - 1, " (dim_order[", i, "] = ", d, ")"),
                      where);
        break;
      }
      seen[d] = true;
    }
  }
  if (!elem || !sizes_ok) return;
  std::optional<uint64_t> nbytes = *elem;
  for (int32_t s : layout.sizes) {
    if (nbytes) nbytes = internal::CheckedMul(*nbytes, static_cast<uint64_t>(s));
  }
  const bool any_zero =
      std::find(layout.sizes.begin(), layout.sizes.end(), 0) != layout.sizes.end();
  if (any_zero) nbytes = 0;
  if (!nbytes) {
    report->Error("C8", kDataLoss,
                  absl::StrCat("key '", internal::Sv(key), "': layout byte size overflows 64 bits"),
                  where);
    return;
  }
  if (segment_size && *nbytes > *segment_size) {
    report->Error("C8", kDataLoss,
                  absl::StrCat("key '", internal::Sv(key), "': layout needs ", *nbytes,
                               " bytes, segment ", segment_index, " holds ", *segment_size),
                  where);
  }
}

namespace {

// C4, C5: the segment table, each segment marked in or out of bounds.
std::vector<Segment> DecodeSegments(
    const flatbuffers::Vector<flatbuffers::Offset<fb::DataSegment>>& segs, const PtdHeader& h,
    uint64_t file_size, bool data_in_file, const std::string& file, Report* report) {
  std::vector<Segment> segments;
  segments.reserve(segs.size());
  std::optional<uint64_t> prev_end = 0;
  for (uint32_t i = 0; i < segs.size(); ++i) {
    const fb::DataSegment* s = segs.Get(i);
    Segment seg{.offset = s->offset(), .size = s->size()};
    // Built only for a diagnostic: the file name is not copied per segment.
    const auto sw = [&] { return Where{.file = file, .segment = i}; };
    if (!internal::RangeInside(seg.offset, seg.size, h.segment_data_size)) {
      report->Error("C4", kDataLoss,
                    absl::StrCat("segment ", i, ": offset ", seg.offset, " + size ", seg.size,
                                 " exceeds segment_data_size ", h.segment_data_size),
                    sw());
      seg.in_bounds = false;
    } else if (const auto abs = internal::CheckedAdd(h.segment_base_offset, seg.offset);
               !data_in_file && (!abs || !internal::RangeInside(*abs, seg.size, file_size))) {
      seg.in_bounds = false;  // H4 already reported the short file.
    }
    if (prev_end && seg.offset < *prev_end) {
      report->Error("C5", kDataLoss,
                    absl::StrCat("segment ", i, " starts at ", seg.offset,
                                 ", before the end of segment ", i - 1, " at ", *prev_end),
                    sw());
    }
    prev_end = internal::CheckedAdd(seg.offset, seg.size);
    segments.push_back(seg);
  }
  return segments;
}

// C6 for one entry's key: sets e->key, returns whether the key is usable.
bool DecodeKey(const fb::NamedData& nd, uint32_t i, const Where& where, NamedDataEntry* e,
               Report* report) {
  if (nd.key() == nullptr) {
    report->Error("C6", kDataLoss, absl::StrCat("named_data[", i, "] has no key"), where);
    return false;
  }
  e->key = nd.key()->string_view();
  if (e->key.empty()) {
    report->Error("C6", kDataLoss, absl::StrCat("named_data[", i, "] has an empty key"), where);
    return false;
  }
  if (!internal::IsValidUtf8(e->key)) {
    report->Error("C6", kDataLoss,
                  absl::StrCat("named_data[", i, "]: key '", internal::Escaped(e->key),
                               "' is not valid UTF-8"),
                  where);
    return false;
  }
  return true;
}

// C8: the entry's tensor layout, decoded and checked against its segment.
TensorLayout DecodeLayout(const fb::TensorLayout& l, const NamedDataEntry& e,
                          std::optional<uint64_t> seg_size, const Where& kw, Report* report) {
  TensorLayout layout;
  layout.scalar_type = static_cast<int8_t>(l.scalar_type());
  bool present = true;
  if (l.sizes() == nullptr) {
    report->Error("C8", kDataLoss,
                  absl::StrCat("key '", internal::Sv(e.key), "': layout has no sizes"), kw);
    present = false;
  } else {
    layout.sizes.assign(l.sizes()->begin(), l.sizes()->end());
  }
  if (l.dim_order() == nullptr) {
    report->Error("C8", kDataLoss,
                  absl::StrCat("key '", internal::Sv(e.key), "': layout has no dim_order"), kw);
    present = false;
  } else {
    layout.dim_order.assign(l.dim_order()->begin(), l.dim_order()->end());
  }
  if (present) {
    CheckTensorLayout(layout, e.key, e.segment_index, seg_size, kw, report);
  }
  return layout;
}

// C6, C7, C8 over every entry; fills `named` and the key index `index`
// (Container's private set of entry pointers), whose keys, like the
// entries', view the FlatBuffer.
template <typename KeyIndex>
void DecodeNamedData(const flatbuffers::Vector<flatbuffers::Offset<fb::NamedData>>& entries,
                     const std::vector<Segment>& segments, const std::string& file,
                     std::vector<NamedDataEntry>* named, std::vector<TensorLayout>* layouts,
                     KeyIndex* index, Report* report) {
  const Where where{.file = file};
  named->reserve(entries.size());
  // Entries point into `layouts`: it must never reallocate.
  size_t num_layouts = 0;
  for (const fb::NamedData* nd : entries) num_layouts += nd->tensor_layout() != nullptr;
  layouts->reserve(num_layouts);
  index->reserve(entries.size());
  std::vector<bool> key_oks;
  key_oks.reserve(entries.size());
  for (uint32_t i = 0; i < entries.size(); ++i) {
    const fb::NamedData* nd = entries.Get(i);
    NamedDataEntry e;
    e.segment_index = nd->segment_index();
    const bool key_ok = DecodeKey(*nd, i, where, &e, report);
    // Built only for a diagnostic: opening allocates little per key.
    const auto kw = [&] {
      return Where{.file = file,
                   .key = key_ok ? std::optional<std::string>(e.key) : std::nullopt,
                   .segment = e.segment_index};
    };
    std::optional<uint64_t> seg_size;
    if (e.segment_index >= segments.size()) {
      report->Error(
          "C7", kDataLoss,
          absl::StrCat("key '", internal::Escaped(e.key), "': segment_index ", e.segment_index,
                       " is out of range (", segments.size(), " segments)"),
          kw());
    } else {
      seg_size = segments[e.segment_index].size;
    }
    if (const fb::TensorLayout* l = nd->tensor_layout()) {
      e.layout = &layouts->emplace_back(DecodeLayout(*l, e, seg_size, kw(), report));
    }
    named->push_back(e);
    key_oks.push_back(key_ok);
  }
  // C6, and the index, in a pass of their own (so C6 follows every C7 and
  // C8, as M6 follows M5). A tight loop of independent inserts lets the
  // processor overlap their cache misses (a table of 100,000 keys is larger
  // than the L2 cache): Container::Open of 100,000 keys took 17 ms with the
  // inserts inside the decoding loop, 10.6 ms so (ptd_suite_bench
  // Verify/100000). Prefetching the slots ahead measured no faster.
  for (size_t i = 0; i < named->size(); ++i) {
    if (!key_oks[i]) continue;
    const NamedDataEntry& stored = (*named)[i];
    if (auto [it, inserted] = index->insert(&stored); !inserted) {
      report->Error(
          "C6", kDataLoss,
          absl::StrCat("key '", internal::Sv(stored.key),
                       "' appears more than once"
                       " (entries ",
                       *it - named->data(), " and ", i, ")"),
          Where{.file = file, .key = std::string(stored.key), .segment = stored.segment_index});
    }
  }
}

}  // namespace

std::unique_ptr<Container> Container::Verify(std::shared_ptr<const FileSource> source,
                                             Report* report) {
  std::unique_ptr<Container> c(new Container(std::move(source)));
  const std::string& file = c->source_->name();
  const Where where{.file = file};
  bool data_in_file = true;
  if (!CheckHeader(*c->source_, report, &c->header_, &data_in_file)) {
    return nullptr;
  }
  const PtdHeader& h = c->header_;

  // C1: the FlatBuffer, [0, flatbuffer_offset + flatbuffer_size).
  const uint64_t fb_len = h.flatbuffer_offset + h.flatbuffer_size;  // Checked.
  auto fb = ReadBytes(*c->source_, 0, fb_len);
  if (!fb.ok()) {
    report->Error("C1", fb.status().code(), std::string(fb.status().message()), where);
    return nullptr;
  }
  flatbuffers::Verifier verifier(fb->data(), fb->size(), internal::kVerifierMaxDepth,
                                 internal::kVerifierMaxTables, /*check_alignment=*/true);
  if (!fb::VerifyFlatTensorBuffer(verifier)) {
    report->Error("C1", kDataLoss,
                  absl::StrCat("the ", fb_len, "-byte FlatBuffer fails the FlatBuffers verifier"),
                  where);
    return nullptr;
  }
  // Kept: the keys view it. A move keeps the bytes where they are.
  c->flatbuffer_ = *std::move(fb);
  const fb::FlatTensor* root = fb::GetFlatTensor(c->flatbuffer_.data());

  // C2.
  c->version_ = root->version();
  if (c->version_ != kPtdVersion) {
    report->Error("C2", absl::StatusCode::kUnimplemented,
                  absl::StrCat("version ", c->version_, " is not supported (this reader supports ",
                               kPtdVersion, ")"),
                  where);
  }
  // C3.
  if (root->segments() == nullptr) {
    report->Error("C3", kDataLoss, "the segments vector is missing", where);
  }
  if (root->named_data() == nullptr) {
    report->Error("C3", kDataLoss, "the named_data vector is missing", where);
  }
  // C4, C5.
  if (const auto* segs = root->segments()) {
    c->segments_ = DecodeSegments(*segs, h, c->source_->size(), data_in_file, file, report);
  }
  // C6, C7, C8.
  if (const auto* named = root->named_data()) {
    DecodeNamedData(*named, c->segments_, file, &c->named_data_, &c->layouts_, &c->index_, report);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Container>> Container::Open(
    std::shared_ptr<const FileSource> source) {
  Report report;
  auto c = Verify(std::move(source), &report);
  if (!report.ok()) return report.FirstError();
  return c;
}

const NamedDataEntry* Container::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : *it;
}

absl::StatusOr<Bytes> Container::SegmentData(uint32_t index) const {
  if (index >= segments_.size()) {
    return absl::OutOfRangeError(absl::StrCat(path(), ": segment ", index, " is out of range (",
                                              segments_.size(), " segments)"));
  }
  const Segment& s = segments_[index];
  if (!s.in_bounds) {
    return absl::DataLossError(absl::StrCat(path(), ": segment ", index, " (offset ", s.offset,
                                            ", size ", s.size, ") lies outside the data region"));
  }
  return ReadBytes(*source_, header_.segment_base_offset + s.offset, s.size);
}

absl::StatusOr<Bytes> Container::Get(std::string_view key) const {
  const NamedDataEntry* e = Find(key);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path(), ": no named data with key '", internal::Sv(key), "'"));
  }
  return SegmentData(e->segment_index);
}

uint64_t Container::ObservedSegmentAlignment() const {
  constexpr uint64_t kCap = uint64_t{1} << 20;
  uint64_t bits = header_.segment_base_offset;
  for (const Segment& s : segments_) {
    if (s.size > 0) bits |= s.offset;
  }
  if (bits == 0) return kCap;
  return std::min<uint64_t>(kCap, uint64_t{1} << std::countr_zero(bits));
}

}  // namespace ptd
