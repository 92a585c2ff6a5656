// safetensors: the checkpoint format's reader and writer (docs/SPEC.md
// section 7, rules S1-S7).
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON,
// then the data buffer. The reader checks every rule of the format's
// reference implementation (huggingface/safetensors) before it hands out a
// byte; the writer lays a file out as the reference writer does (tensors
// ordered by dtype alignment, largest first, then by name; the header padded
// with spaces to a multiple of 8) and writes it atomically.
//
// Example:
//   absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(source);
//   if (!file.ok()) return file.status();
//   for (const SafetensorsTensor& t : file->tensors()) {
//     std::vector<uint8_t> bytes(t.nbytes());
//     if (absl::Status s = file->Read(t, 0, absl::MakeSpan(bytes)); !s.ok()) return s;
//   }
//
// Errors: DataLoss naming the file, the tensor where there is one, the rule
// and both numbers, e.g. "model.safetensors: tensor \"w\": shape [2,3] x F32
// (4 bytes) is 24 bytes but data_offsets span 20 (S5)".
//
// Thread-safety: a SafetensorsFile and a SafetensorsCheckpoint are immutable
// once opened; const methods are safe to call concurrently.
#ifndef PTD_SAFETENSORS_H_
#define PTD_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/atomic_file.h"
#include "ptd/file_source.h"

namespace ptd {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // S2
inline constexpr std::string_view kSafetensorsMetadataKey = "__metadata__";
inline constexpr std::string_view kSafetensorsIndexSuffix = ".safetensors.index.json";

// One name of the closed dtype set (S4).
struct SafetensorsDtype {
  std::string_view name;  // "F32", "BF16", ...
  uint32_t bits = 0;      // Element size in bits (F4 is 4, F6_* 6).
  // The ExecuTorch ScalarType it maps to (SPEC section 7), or -1 when none.
  int32_t scalar_type = -1;
  // Where the reference writer sorts it: larger first (its alignment).
  uint32_t order = 0;
};

// The dtype called `name`, or null when it is not in the closed set.
const SafetensorsDtype* FindSafetensorsDtype(std::string_view name);
// The dtype ScalarType `scalar_type` maps to, or null when it has none.
const SafetensorsDtype* SafetensorsDtypeFor(int32_t scalar_type);

struct SafetensorsTensor {
  std::string name;
  const SafetensorsDtype* dtype = nullptr;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data buffer.
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Reads and checks the header (S1-S6): the first violation as DataLoss,
  // ending in the rule ID ("... (S5)"); a read error as the source reports it.
  // Reads N + 8 bytes at most, after checking N against S2 and the file size;
  // holds the header's JSON only while it opens. Tensor names may be empty
  // (the reference reader takes them; PlanSafetensors does not write them).
  static absl::StatusOr<SafetensorsFile> Open(std::shared_ptr<const FileSource> source);

  const std::string& path() const { return source_->name(); }
  const FileSource& source() const { return *source_; }
  // 8 + N: the file offset of the data buffer.
  uint64_t data_offset() const { return data_offset_; }
  // In data order (ascending begin).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // `__metadata__`, in the header's order.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // The tensor called `name`, or null. O(1).
  const SafetensorsTensor* Find(std::string_view name) const;

  // Reads tensor bytes [offset, offset + dst.size()). OutOfRange past the
  // tensor's end; a read error as the source reports it.
  absl::Status Read(const SafetensorsTensor& tensor, uint64_t offset,
                    absl::Span<uint8_t> dst) const;

 private:
  SafetensorsFile() = default;

  std::shared_ptr<const FileSource> source_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// A checkpoint: one .safetensors file, or a sharded one (a
// `*.safetensors.index.json` and the shards its `weight_map` names, S7).
class SafetensorsCheckpoint {
 public:
  // `path` ending in ".json" is read as an index; anything else as one file.
  // Shards are read through pread(2), bounded by the caller's reads.
  // Errors: what OpenFile returns for the file or the index itself
  // (NotFound, ...); DataLoss "(S7)" for an index that breaks S7 (not a
  // JSON object with a weight_map of plain file names, at most 100,000,000
  // bytes; a name mapped twice; a shard that cannot be opened or lacks a
  // tensor mapped to it); a shard's own S1-S6 DataLoss.
  static absl::StatusOr<SafetensorsCheckpoint> Open(const std::string& path);

  struct TensorRef {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };
  // The tensor called `name`, or nullopt.
  std::optional<TensorRef> Find(std::string_view name) const;
  // Every tensor, shard by shard in the index's order, each in data order.
  // With an index, only the tensors its weight_map maps to their shard.
  std::vector<TensorRef> tensors() const;
  // The files read: the one file, or the index then each shard.
  const std::vector<std::string>& paths() const { return paths_; }

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) = default;

 private:
  SafetensorsCheckpoint() = default;

  std::vector<std::string> paths_;
  // Behind pointers so that TensorRefs survive moves.
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, TensorRef> by_name_;
};

// What the writer lays out: a tensor's name, dtype and shape.
struct SafetensorsTensorSpec {
  std::string name;
  const SafetensorsDtype* dtype = nullptr;
  std::vector<uint64_t> shape;
};

// A file's layout before any data is written: the tensors in the reference
// writer's order with their data_offsets, and the header bytes (length
// prefix and JSON, space-padded to a multiple of 8).
struct SafetensorsLayout {
  std::vector<SafetensorsTensor> tensors;  // Data order.
  std::vector<uint8_t> header;             // 8 + N bytes.
  uint64_t file_size() const;
};

// Lays out `tensors` (InvalidArgument for a duplicate or empty name, a null
// dtype, or a size that overflows 64 bits) with `metadata` as
// `__metadata__` (written only when not empty).
absl::StatusOr<SafetensorsLayout> PlanSafetensors(
    std::vector<SafetensorsTensorSpec> tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata);

// Writes `layout` to `path` atomically: the header, then for each tensor of
// layout.tensors in order, `fill(tensor, write)`, which must write exactly
// tensor.nbytes() bytes (InvalidArgument otherwise; nothing is left behind).
absl::Status WriteSafetensors(
    const std::string& path, const SafetensorsLayout& layout,
    const std::function<absl::Status(const SafetensorsTensor&, const WriteFn&)>& fill);

// Hugging Face's sharded layout: "model-00001-of-00004.safetensors" (1-based
// index, 5 digits) and the index file name.
std::string ShardFileName(size_t index, size_t count);
inline constexpr std::string_view kShardIndexFileName = "model.safetensors.index.json";

}  // namespace ptd

#endif  // PTD_SAFETENSORS_H_
