// The safetensors reader and writer (docs/SPEC.md section 7, S1-S7). The
// rules follow huggingface/safetensors' tensor.rs: read_metadata (S1-S3),
// HashMetadata's deserialization (S3, S4) and Metadata::validate (S5, S6);
// the writer follows `prepare`.
#include "ptd/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "ptd/rules.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"

namespace ptd {
namespace {

using internal::CheckedAdd;
using internal::CheckedMul;
using internal::Sv;
using Json = nlohmann::json;

// tensor.rs' Dtype, in its declaration order ("increasing alignment order":
// the writer sorts by it, largest first).
constexpr std::array<SafetensorsDtype, 20> kDtypes = {{
    {"BOOL", 8, 11, 0},    {"F4", 4, -1, 1},   {"F6_E2M3", 6, -1, 2}, {"F6_E3M2", 6, -1, 3},
    {"U8", 8, 0, 4},       {"I8", 8, 1, 5},    {"F8_E5M2", 8, 23, 6}, {"F8_E4M3", 8, 24, 7},
    {"F8_E8M0", 8, -1, 8}, {"I16", 16, 2, 9},  {"U16", 16, 27, 10},   {"F16", 16, 5, 11},
    {"BF16", 16, 15, 12},  {"I32", 32, 3, 13}, {"U32", 32, 28, 14},   {"F32", 32, 6, 15},
    {"C64", 64, -1, 16},   {"F64", 64, 7, 17}, {"I64", 64, 4, 18},    {"U64", 64, 29, 19},
}};

// A name for messages: quoted, control characters and bad bytes made visible.
std::string Quoted(std::string_view s) {
  return absl::StrCat("\"", internal::PrintableUtf8(s), "\"");
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Bytes of `count` elements of `dtype`: nullopt on overflow or when the bits
// do not fill whole bytes (tensor.rs: ValidationOverflow, MisalignedSlice).
std::optional<uint64_t> ElementBytes(const std::vector<uint64_t>& shape,
                                     const SafetensorsDtype& dtype, bool* partial) {
  *partial = false;
  uint64_t n = 1;
  for (uint64_t d : shape) {
    auto next = CheckedMul(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  auto bits = CheckedMul(n, uint64_t{dtype.bits});
  if (!bits) return std::nullopt;
  if (*bits % 8 != 0) {
    *partial = true;
    return std::nullopt;
  }
  return *bits / 8;
}

// Parses `text` (valid UTF-8) as JSON, refusing a duplicate key in any
// object (nlohmann keeps the last one silently). The DOM is a std::map (a
// lookup is O(log n) for a hostile header of millions of keys); the order
// of the keys of the object under the top-level key `ordered` is kept in
// `*order`. On failure `*error` says why and the result is discarded.
Json ParseJsonNoDuplicates(std::string_view text, std::string_view ordered,
                           std::vector<std::string>* order, std::string* error) {
  std::vector<absl::flat_hash_set<std::string>> keys;  // One set per open object.
  std::string duplicate;
  bool top_level_duplicate = false;
  bool in_ordered = false;  // The last top-level key was `ordered`.
  const Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (keys.empty() || !parsed.is_string()) break;
        const std::string& key = parsed.get_ref<const std::string&>();
        if (depth == 1) in_ordered = key == ordered;
        if (depth == 2 && in_ordered && order != nullptr) order->push_back(key);
        if (!keys.back().insert(key).second && duplicate.empty()) {
          duplicate = key;
          top_level_duplicate = depth == 1;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), cb);
  } catch (const Json::exception& e) {
    *error = absl::StrCat("not valid JSON: ", e.what());
    return Json();
  }
  if (!duplicate.empty()) {
    *error =
        absl::StrCat(top_level_duplicate ? "name " : "key ", Quoted(duplicate), " appears twice");
    return Json();
  }
  return j;
}

bool IsU64(const Json& j) { return j.is_number_unsigned(); }

// DataLoss "<file>: <parts> (<rule>)": how the reader reports a broken rule.
template <typename... Parts>
absl::Status Loss(const std::string& file, std::string_view rule, const Parts&... parts) {
  return RuleError(absl::StatusCode::kDataLoss, rule, absl::StrCat(file, ": ", parts...));
}

// S1, S2: reads the header length N and the N header bytes that follow it.
absl::StatusOr<std::string> ReadHeaderText(const FileSource& source) {
  const std::string& file = source.name();
  const uint64_t size = source.size();
  if (size < 8) {
    return Loss(file, "S1", "the file is ", size, " bytes, shorter than the 8-byte header length");
  }
  uint8_t len_bytes[8];
  PTD_RETURN_IF_ERROR(source.ReadAt(0, absl::MakeSpan(len_bytes, 8)));
  const uint64_t n = internal::LoadLE<uint64_t>(len_bytes);
  if (n > kSafetensorsMaxHeaderBytes) {
    return Loss(file, "S2", "header length ", n, " exceeds the limit of ",
                kSafetensorsMaxHeaderBytes, " bytes");
  }
  if (!internal::RangeInside(8, n, size)) {  // 8 + n <= size, without overflow.
    return Loss(file, "S1", "header length ", n, " needs ", n + 8,
                " bytes (8 + N) but the file is ", size, " bytes");
  }
  std::string text(n, '\0');
  PTD_RETURN_IF_ERROR(
      source.ReadAt(8, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size())));
  return text;
}

// S3: the header text as a JSON object without duplicate keys; the order of
// the keys of `__metadata__` goes to `*metadata_order`. Frees `text` once
// parsed (only one copy of the header at a time).
absl::StatusOr<Json> ParseHeader(const std::string& file, std::string text,
                                 std::vector<std::string>* metadata_order) {
  if (!internal::IsValidUtf8(text)) {
    return Loss(file, "S3", "the ", text.size(), "-byte header is not valid UTF-8");
  }
  std::string error;
  Json header = ParseJsonNoDuplicates(text, kSafetensorsMetadataKey, metadata_order, &error);
  text = std::string();  // Only one copy of the header at a time.
  if (!error.empty()) return Loss(file, "S3", "header: ", error);
  if (!header.is_object()) {
    return Loss(file, "S3", "the header is a JSON ", header.type_name(), ", not an object");
  }
  return header;
}

// S3: `__metadata__`, an object of strings, in the header's order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMetadata(
    const std::string& file, const Json& value, const std::vector<std::string>& order) {
  if (!value.is_object()) {
    return Loss(file, "S3", "__metadata__ is a JSON ", value.type_name(),
                ", not an object of strings");
  }
  std::vector<std::pair<std::string, std::string>> metadata;
  for (const std::string& key : order) {
    const auto it = value.find(key);
    if (it == value.end()) continue;  // Cannot happen: the keys came from the parse.
    const Json& v = *it;
    if (!v.is_string()) {
      return Loss(file, "S3", "__metadata__ ", Quoted(key), " is a JSON ", v.type_name(),
                  ", not a string");
    }
    metadata.emplace_back(key, v.get<std::string>());
  }
  return metadata;
}

// S4: one tensor entry: an object with a known dtype, a shape of
// non-negative integers and data_offsets [begin, end].
absl::StatusOr<SafetensorsTensor> ReadTensorEntry(const std::string& file, const std::string& name,
                                                  const Json& value) {
  const std::string where = absl::StrCat("tensor ", Quoted(name), ": ");
  if (!value.is_object()) {
    return Loss(file, "S4", where, "is a JSON ", value.type_name(), ", not an object");
  }
  SafetensorsTensor t;
  t.name = name;
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) return Loss(file, "S4", where, "has no ", field);
  }
  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    return Loss(file, "S4", where, "dtype is a JSON ", dtype.type_name(), ", not a string");
  }
  t.dtype = FindSafetensorsDtype(dtype.get_ref<const std::string&>());
  if (t.dtype == nullptr) {
    return Loss(file, "S4", where, "unknown dtype ", Quoted(dtype.get_ref<const std::string&>()));
  }
  const Json& shape = value["shape"];
  if (!shape.is_array()) {
    return Loss(file, "S4", where, "shape is a JSON ", shape.type_name(), ", not an array");
  }
  t.shape.reserve(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!IsU64(shape[i])) {
      return Loss(file, "S4", where, "shape[", i, "] is ", shape[i].dump(),
                  ", not a non-negative integer");
    }
    t.shape.push_back(shape[i].get<uint64_t>());
  }
  const Json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !IsU64(offsets[0]) || !IsU64(offsets[1])) {
    return Loss(file, "S4", where, "data_offsets is ", offsets.dump(),
                ", not [begin, end] of non-negative integers");
  }
  t.begin = offsets[0].get<uint64_t>();
  t.end = offsets[1].get<uint64_t>();
  return t;
}

// S5, S6: sorts `*tensors` by data_offsets (as tensor.rs does), then requires
// each to start where the previous ended, to hold exactly its shape's bytes,
// and the last to end where the data buffer (`data_size` bytes) does.
absl::Status CheckTiling(const std::string& file, std::vector<SafetensorsTensor>* tensors,
                         uint64_t data_size) {
  std::sort(tensors->begin(), tensors->end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t expected = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : *tensors) {
    const std::string where = absl::StrCat("tensor ", Quoted(t.name), ": ");
    if (t.end < t.begin) {
      return Loss(file, "S6", where, "data_offsets [", t.begin, ", ", t.end,
                  "] end before they begin");
    }
    if (t.begin != expected) {
      const std::string after =
          previous == nullptr
              ? std::string("the data buffer starts at 0")
              : absl::StrCat("the previous tensor ", Quoted(previous->name), " ends at ", expected);
      return Loss(file, "S6", where, "data_offsets begin at ", t.begin, " but ", after,
                  t.begin < expected ? " (overlap)" : " (gap)");
    }
    bool partial = false;
    const std::optional<uint64_t> bytes = ElementBytes(t.shape, *t.dtype, &partial);
    if (!bytes) {
      return Loss(file, "S5", where, "shape ", ShapeString(t.shape), " x ", Sv(t.dtype->name), " (",
                  t.dtype->bits, " bits) ",
                  partial ? "is not a whole number of bytes" : "overflows 64 bits",
                  "; data_offsets span ", t.end - t.begin);
    }
    if (*bytes != t.end - t.begin) {
      return Loss(file, "S5", where, "shape ", ShapeString(t.shape), " x ", Sv(t.dtype->name), " (",
                  t.dtype->bits, " bits) is ", *bytes, " bytes but data_offsets span ",
                  t.end - t.begin);
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != data_size) {
    return Loss(file, "S6", "the tensors end at ", expected, " but the data buffer holds ",
                data_size, " bytes (",
                expected < data_size ? "bytes past the last tensor" : "the file is truncated", ")");
  }
  return absl::OkStatus();
}

}  // namespace

const SafetensorsDtype* FindSafetensorsDtype(std::string_view name) {
  for (const SafetensorsDtype& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const SafetensorsDtype* SafetensorsDtypeFor(int32_t scalar_type) {
  if (scalar_type < 0) return nullptr;
  for (const SafetensorsDtype& d : kDtypes) {
    if (d.scalar_type == scalar_type) return &d;
  }
  return nullptr;
}

// ---- the reader ----

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(std::shared_ptr<const FileSource> source) {
  if (source == nullptr) return absl::InvalidArgumentError("SafetensorsFile::Open: no source");
  const std::string& file = source->name();
  PTD_ASSIGN_OR_RETURN(std::string text, ReadHeaderText(*source));
  const uint64_t n = text.size();
  std::vector<std::string> metadata_order;
  PTD_ASSIGN_OR_RETURN(Json header, ParseHeader(file, std::move(text), &metadata_order));

  SafetensorsFile out;
  out.data_offset_ = 8 + n;
  const uint64_t data_size = source->size() - out.data_offset_;
  out.tensors_.reserve(header.size());
  for (auto& [name, value] : header.items()) {
    if (name == kSafetensorsMetadataKey) {
      PTD_ASSIGN_OR_RETURN(out.metadata_, ReadMetadata(file, value, metadata_order));
      continue;
    }
    PTD_ASSIGN_OR_RETURN(SafetensorsTensor t, ReadTensorEntry(file, name, value));
    out.tensors_.push_back(std::move(t));
  }
  header = Json();

  PTD_RETURN_IF_ERROR(CheckTiling(file, &out.tensors_, data_size));
  out.index_.reserve(out.tensors_.size());
  for (size_t i = 0; i < out.tensors_.size(); ++i) {
    if (!out.index_.emplace(out.tensors_[i].name, i).second) {
      // The duplicate-key check of the parse makes this unreachable.
      return Loss(file, "S3", "tensor ", Quoted(out.tensors_[i].name), " appears twice");
    }
  }
  out.source_ = std::move(source);
  return out;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::Read(const SafetensorsTensor& tensor, uint64_t offset,
                                   absl::Span<uint8_t> dst) const {
  if (!internal::RangeInside(offset, dst.size(), tensor.nbytes())) {
    return absl::OutOfRangeError(absl::StrCat(path(), ": tensor ", Quoted(tensor.name),
                                              ": read of ", dst.size(), " bytes at ", offset,
                                              " is past its ", tensor.nbytes(), " bytes"));
  }
  if (dst.empty()) return absl::OkStatus();
  return source_->ReadAt(data_offset_ + tensor.begin + offset, dst);
}

// ---- checkpoints ----

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A shard name the index may give: a plain file name in its folder.
bool PlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

}  // namespace

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& path) {
  SafetensorsCheckpoint out;
  out.paths_.push_back(path);
  if (!EndsWith(path, ".json")) {
    PTD_ASSIGN_OR_RETURN(std::shared_ptr<const FileSource> source, OpenFile(path, false));
    PTD_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(std::move(source)));
    out.files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
    const SafetensorsFile* f = out.files_.back().get();
    for (const SafetensorsTensor& t : f->tensors()) out.by_name_[t.name] = TensorRef{f, &t};
    return out;
  }

  const auto loss = [&](auto&&... parts) {
    return RuleError(absl::StatusCode::kDataLoss, "S7", absl::StrCat(path, ": ", parts...));
  };
  PTD_ASSIGN_OR_RETURN(std::shared_ptr<const FileSource> index, OpenFile(path, false));
  if (index->size() > kSafetensorsMaxHeaderBytes) {
    return loss("the index is ", index->size(), " bytes, more than the limit of ",
                kSafetensorsMaxHeaderBytes);
  }
  std::string text(index->size(), '\0');
  PTD_RETURN_IF_ERROR(
      index->ReadAt(0, absl::MakeSpan(reinterpret_cast<uint8_t*>(text.data()), text.size())));
  if (!internal::IsValidUtf8(text)) return loss("the index is not valid UTF-8");
  std::string error;
  std::vector<std::string> order;
  const Json j = ParseJsonNoDuplicates(text, "weight_map", &order, &error);
  if (!error.empty()) return loss("index: ", error);
  if (!j.is_object()) return loss("the index is a JSON ", j.type_name(), ", not an object");
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    return loss("the index has no weight_map object");
  }

  // Shards in the order the weight_map first names them.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  std::vector<std::string> shard_names;
  absl::flat_hash_map<std::string, size_t> shard_of_name;
  std::vector<std::pair<std::string, size_t>> mapped;  // Tensor name, shard.
  const Json& weight_map = j["weight_map"];
  for (const std::string& name : order) {
    const auto found = weight_map.find(name);
    if (found == weight_map.end()) continue;  // Cannot happen: the keys came from the parse.
    const Json& file = *found;
    if (!file.is_string()) {
      return loss("weight_map ", Quoted(name), " is a JSON ", file.type_name(),
                  ", not a file name");
    }
    const std::string& shard = file.get_ref<const std::string&>();
    if (!PlainFileName(shard)) {
      return loss("weight_map ", Quoted(name), " names ", Quoted(shard),
                  ", not a file in the index's folder (no path separators, no \"..\")");
    }
    auto [it, inserted] = shard_of_name.emplace(shard, shard_names.size());
    if (inserted) shard_names.push_back(shard);
    mapped.emplace_back(name, it->second);
  }

  for (const std::string& shard : shard_names) {
    const std::string shard_path = dir + shard;
    auto source = OpenFile(shard_path, false);
    if (!source.ok()) {
      return loss("weight_map names ", Quoted(shard),
                  ", which cannot be opened: ", source.status().message());
    }
    PTD_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(*std::move(source)));
    out.paths_.push_back(shard_path);
    out.files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
  }
  for (const auto& [name, shard] : mapped) {
    const SafetensorsFile* f = out.files_[shard].get();
    const SafetensorsTensor* t = f->Find(name);
    if (t == nullptr) {
      return loss("weight_map maps tensor ", Quoted(name), " to ", Quoted(shard_names[shard]),
                  ", which does not hold it (", f->tensors().size(), " tensors)");
    }
    out.by_name_.emplace(name, TensorRef{f, t});
  }
  return out;
}

std::optional<SafetensorsCheckpoint::TensorRef> SafetensorsCheckpoint::Find(
    std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<SafetensorsCheckpoint::TensorRef> SafetensorsCheckpoint::tensors() const {
  std::vector<TensorRef> out;
  out.reserve(by_name_.size());
  for (const auto& file : files_) {
    for (const SafetensorsTensor& t : file->tensors()) {
      auto it = by_name_.find(t.name);
      // A shard's tensor the index maps elsewhere (or not at all) is not listed.
      if (it != by_name_.end() && it->second.tensor == &t) out.push_back(it->second);
    }
  }
  return out;
}

// ---- the writer ----

uint64_t SafetensorsLayout::file_size() const {
  return header.size() + (tensors.empty() ? 0 : tensors.back().end);
}

absl::StatusOr<SafetensorsLayout> PlanSafetensors(
    std::vector<SafetensorsTensorSpec> tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  absl::flat_hash_set<std::string> names;
  for (const SafetensorsTensorSpec& t : tensors) {
    if (t.name.empty() || t.name == kSafetensorsMetadataKey || !internal::IsValidUtf8(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: bad tensor name ",
                                                     Quoted(t.name),
                                                     " (empty, \"__metadata__\" or not UTF-8)"));
    }
    if (t.dtype == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", Quoted(t.name), " has no dtype"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", Quoted(t.name), " appears twice"));
    }
  }
  absl::flat_hash_set<std::string> keys;
  for (const auto& [k, v] : metadata) {
    if (!internal::IsValidUtf8(k) || !internal::IsValidUtf8(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: __metadata__ ", Quoted(k), " is not UTF-8"));
    }
    if (!keys.insert(k).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: __metadata__ ", Quoted(k), " appears twice"));
    }
  }
  // tensor.rs' prepare: dtype descending (its alignment), then name.
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensorSpec& a, const SafetensorsTensorSpec& b) {
              if (a.dtype->order != b.dtype->order) return a.dtype->order > b.dtype->order;
              return a.name < b.name;
            });

  SafetensorsLayout layout;
  layout.tensors.reserve(tensors.size());
  // serde_json's compact form: __metadata__ first, then the tensors in data
  // order, each {"dtype","shape","data_offsets"}. Members are appended as
  // text: an ordered_json object would look each name up linearly.
  std::string text = "{";
  const auto member = [](std::string* out, const std::string& name, const std::string& value_json) {
    if (out->size() > 1) *out += ',';
    *out += Json(name).dump();
    *out += ':';
    *out += value_json;
  };
  if (!metadata.empty()) {
    std::string m = "{";
    for (const auto& [k, v] : metadata) member(&m, k, Json(v).dump());
    m += '}';
    member(&text, std::string(kSafetensorsMetadataKey), m);
  }
  uint64_t offset = 0;
  for (SafetensorsTensorSpec& spec : tensors) {
    bool partial = false;
    const std::optional<uint64_t> bytes = ElementBytes(spec.shape, *spec.dtype, &partial);
    const std::optional<uint64_t> end = bytes ? CheckedAdd(offset, *bytes) : std::nullopt;
    if (!end) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", Quoted(spec.name), ": shape ",
                       ShapeString(spec.shape), " x ", Sv(spec.dtype->name),
                       partial ? " is not a whole number of bytes" : " overflows 64 bits"));
    }
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = std::string(spec.dtype->name);
    info["shape"] = spec.shape;
    info["data_offsets"] = nlohmann::ordered_json::array({offset, *end});
    member(&text, spec.name, info.dump());
    layout.tensors.push_back(
        SafetensorsTensor{std::move(spec.name), spec.dtype, std::move(spec.shape), offset, *end});
    offset = *end;
  }
  text += '}';
  text.resize((text.size() + 7) / 8 * 8, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes) {
    return RuleError(absl::StatusCode::kInvalidArgument, "S2",
                     absl::StrCat("safetensors: the header is ", text.size(),
                                  " bytes, more than the limit of ", kSafetensorsMaxHeaderBytes));
  }
  layout.header.resize(8 + text.size());
  internal::StoreLE<uint64_t>(layout.header.data(), text.size());
  std::memcpy(layout.header.data() + 8, text.data(), text.size());
  return layout;
}

absl::Status WriteSafetensors(
    const std::string& path, const SafetensorsLayout& layout,
    const std::function<absl::Status(const SafetensorsTensor&, const WriteFn&)>& fill) {
  return WriteFileAtomically(path, [&](const WriteFn& write) -> absl::Status {
    PTD_RETURN_IF_ERROR(write(layout.header));
    for (const SafetensorsTensor& t : layout.tensors) {
      uint64_t written = 0;
      const auto too_many = [&](uint64_t n) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor ", Quoted(t.name), ": the fill wrote ", n, " bytes, not ", t.nbytes()));
      };
      const WriteFn counted = [&](absl::Span<const uint8_t> bytes) -> absl::Status {
        if (bytes.size() > t.nbytes() - written) return too_many(written + bytes.size());
        written += bytes.size();
        return write(bytes);
      };
      PTD_RETURN_IF_ERROR(fill(t, counted));
      if (written != t.nbytes()) return too_many(written);
    }
    return absl::OkStatus();
  });
}

std::string ShardFileName(size_t index, size_t count) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", index, count);
}

}  // namespace ptd
