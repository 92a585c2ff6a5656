// ExtractWeights: a verified bundle's weights as a safetensors checkpoint
// (docs/SPEC.md section 7).
//
// Each stored weight's view is gathered row-major from the .ptd (pread, in
// bounded windows) straight into the output file. The source files are hashed
// on a second thread meanwhile; their digests go into `__metadata__`, so the
// header (whose length does not depend on them: a digest is always 64
// characters) is written last, at offset 0.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <future>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

#include "ptd/checkpoint.h"
#include "ptd/safetensors.h"
#include "ptd/scalar_type.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

using internal::Sv;

constexpr uint64_t kReadChunk = uint64_t{1} << 20;
constexpr size_t kDigestHexSize = 64;

// One tensor to write, and where its bytes come from.
struct Item {
  std::string name;
  const SafetensorsDtype* dtype = nullptr;
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
  uint64_t storage_offset = 0;  // File offset of the storage (or raw bytes).
  uint64_t storage_nbytes = 0;
  const ResolvedWeight* weight = nullptr;  // Null: raw bytes (key mode).
  std::string source;                      // Manifest source, for messages.
  size_t result_index = 0;
};

bool SameView(const WeightEntry& a, const WeightEntry& b) {
  return a.storage_key == b.storage_key && a.dtype == b.dtype &&
         a.storage_nbytes == b.storage_nbytes && a.storage_offset == b.storage_offset &&
         a.sizes == b.sizes && a.strides == b.strides;
}

std::string DimsString(const DimVector& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

absl::StatusOr<std::string> HashFile(const std::string& path) {
  PTD_ASSIGN_OR_RETURN(std::unique_ptr<FileSource> source, OpenPreadFile(path));
  Sha256 sha;
  std::vector<uint8_t> buf(std::min<uint64_t>(kReadChunk, std::max<uint64_t>(source->size(), 1)));
  for (uint64_t at = 0; at < source->size();) {
    const uint64_t n = std::min<uint64_t>(buf.size(), source->size() - at);
    PTD_RETURN_IF_ERROR(source->ReadAt(at, absl::MakeSpan(buf.data(), n)));
    sha.Update(absl::MakeConstSpan(buf.data(), n));
    at += n;
  }
  return sha.HexDigest();
}

using Metadata = std::vector<std::pair<std::string, std::string>>;

// `__metadata__`: each source file and its sha256 (`digests` parallel to
// `files`; placeholders of the same length before they are known).
Metadata MakeMetadata(const std::vector<std::pair<std::string, std::string>>& files,
                      const std::vector<std::string>& digests) {
  Metadata m{{"format", "pt"}};
  for (size_t i = 0; i < files.size(); ++i) {
    m.emplace_back(files[i].first, files[i].second);
    m.emplace_back(files[i].first + ".sha256", digests[i]);
  }
  return m;
}

// Buffered appends, at most `capacity` bytes held.
class Appender {
 public:
  Appender(const WriteFn& write, uint64_t capacity) : write_(write), capacity_(capacity) {
    buf_.reserve(capacity_);
  }
  absl::Status Add(absl::Span<const uint8_t> bytes) {
    if (buf_.size() + bytes.size() > capacity_) PTD_RETURN_IF_ERROR(Flush());
    if (bytes.size() >= capacity_) return write_(bytes);
    buf_.insert(buf_.end(), bytes.begin(), bytes.end());
    return absl::OkStatus();
  }
  absl::Status Flush() {
    if (buf_.empty()) return absl::OkStatus();
    absl::Status s = write_(buf_);
    buf_.clear();
    return s;
  }

 private:
  const WriteFn& write_;
  uint64_t capacity_;
  std::vector<uint8_t> buf_;
};

// Removes what a failed extraction wrote.
class Cleanup {
 public:
  ~Cleanup() {
    if (done_) return;
    std::error_code ec;
    for (const std::string& f : files_) std::filesystem::remove(f, ec);
    if (!dir_.empty()) std::filesystem::remove(dir_, ec);  // Only when empty.
  }
  void AddFile(std::string f) { files_.push_back(std::move(f)); }
  void SetDir(std::string d) { dir_ = std::move(d); }
  void Done() { done_ = true; }

 private:
  std::vector<std::string> files_;
  std::string dir_;
  bool done_ = false;
};

// The source files: (metadata key, path).
using SourceFiles = std::vector<std::pair<std::string, std::string>>;

// The source files' sha256 digests, hashed on a second thread from
// construction on (the destructor waits for it).
class SourceDigests {
 public:
  explicit SourceDigests(const SourceFiles& files)
      : hashing_(
            std::async(std::launch::async, [files]() -> absl::StatusOr<std::vector<std::string>> {
              std::vector<std::string> digests;
              for (const auto& f : files) {
                PTD_ASSIGN_OR_RETURN(std::string d, HashFile(f.second));
                digests.push_back(std::move(d));
              }
              return digests;
            })) {}
  // Waits for the digests (the first time).
  absl::StatusOr<std::vector<std::string>> Get() {
    if (!digests_) digests_ = hashing_.get();
    return *digests_;
  }

 private:
  std::future<absl::StatusOr<std::vector<std::string>>> hashing_;
  std::optional<absl::StatusOr<std::vector<std::string>>> digests_;
};

using ItemIndex = absl::flat_hash_map<std::string_view, size_t>;  // Name -> index into items.

// The item for a resolved weight of `m`: its safetensors dtype, shape, size
// and storage.
absl::StatusOr<Item> WeightItem(const Container& container, const ResolvedManifest& m,
                                const ResolvedWeight& w) {
  const WeightEntry& e = *w.entry;
  const SafetensorsDtype* dtype = SafetensorsDtypeFor(e.dtype);
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("weight '", Sv(e.fqn), "' (", m.source(),
                                                   "): dtype ", Sv(ScalarTypeName(e.dtype)), " (",
                                                   e.dtype, ") has no safetensors name"));
  }
  Item item{.name = std::string(e.fqn), .dtype = dtype};
  for (int64_t s : e.sizes) item.shape.push_back(static_cast<uint64_t>(s));
  const std::optional<uint64_t> nbytes =
      internal::CheckedMul(w.extent->numel, ElementSize(e.dtype).value_or(1));
  if (!nbytes || w.extent->numel == kSaturatedNumel) {
    return absl::InvalidArgumentError(absl::StrCat("weight '", Sv(e.fqn), "' (", m.source(),
                                                   "): its view's elements exceed 2^64 bytes"));
  }
  item.nbytes = *nbytes;
  item.storage_offset = container.SegmentFileOffset(w.named->segment_index);
  item.storage_nbytes = e.storage_nbytes;
  item.weight = &w;
  item.source = m.source();
  return item;
}

// The weights of every manifest, each fqn once: a fqn seen again must have
// the same view. Runtime-owned fqns go to `result->runtime_owned` instead.
absl::Status CollectWeightItems(const WeightSet& weights, const Container& container,
                                std::vector<Item>* items, ExtractResult* result) {
  ItemIndex by_fqn;
  absl::flat_hash_set<std::string_view> runtime_owned;
  for (const ResolvedManifest& m : weights.manifests()) {
    for (const ResolvedWeight& w : m.weights) {
      const WeightEntry& e = *w.entry;
      if (w.runtime_owned) {
        if (runtime_owned.insert(e.fqn).second) result->runtime_owned.emplace_back(e.fqn);
        continue;
      }
      if (!w.ok) continue;
      if (auto it = by_fqn.find(e.fqn); it != by_fqn.end()) {
        const Item& prev = (*items)[it->second];
        const WeightEntry& p = *prev.weight->entry;
        if (!SameView(p, e)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "weight '", Sv(e.fqn), "' differs between ", prev.source, " (key '",
              Sv(p.storage_key), "', dtype ", p.dtype, ", offset ", p.storage_offset, ", sizes ",
              DimsString(p.sizes), ", strides ", DimsString(p.strides), ") and ", m.source(),
              " (key '", Sv(e.storage_key), "', dtype ", e.dtype, ", offset ", e.storage_offset,
              ", sizes ", DimsString(e.sizes), ", strides ", DimsString(e.strides),
              "): one checkpoint tensor cannot hold both"));
        }
        continue;
      }
      PTD_ASSIGN_OR_RETURN(Item item, WeightItem(container, m, w));
      by_fqn.emplace(e.fqn, items->size());
      items->push_back(std::move(item));
    }
  }
  return absl::OkStatus();
}

// Key mode (no weights resolved): each named-data key's raw bytes as U8.
std::vector<Item> KeyItems(const Container& container) {
  std::vector<Item> items;
  const SafetensorsDtype* u8 = SafetensorsDtypeFor(0);
  for (const NamedDataEntry& n : container.named_data()) {
    const uint64_t size = container.SegmentSize(n).value_or(0);
    items.push_back(Item{.name = std::string(n.key),
                         .dtype = u8,
                         .shape = {size},
                         .nbytes = size,
                         .storage_offset = container.SegmentFileOffset(n.segment_index),
                         .storage_nbytes = size});
  }
  return items;
}

// Numbers the items, lists them in `result->tensors` and indexes them by name.
ItemIndex IndexItems(std::vector<Item>* items, ExtractResult* result) {
  ItemIndex item_by_name;
  for (size_t i = 0; i < items->size(); ++i) {
    Item& item = (*items)[i];
    item.result_index = i;
    item_by_name.emplace(item.name, i);
    result->tensors.push_back(ExtractedTensor{.name = item.name,
                                              .scalar_type = item.dtype->scalar_type,
                                              .shape = item.shape,
                                              .nbytes = item.nbytes});
  }
  return item_by_name;
}

// Which tensors go to which file, in the layout's order.
struct FilePlan {
  std::vector<std::vector<SafetensorsTensorSpec>> groups;
  std::vector<std::string> paths;  // Parallel to groups.
};

// Cuts the whole file's layout into shards of at most `max_shard_size` bytes
// (a larger tensor alone); at least one shard, empty when there are no tensors.
absl::StatusOr<std::vector<std::vector<SafetensorsTensorSpec>>> ShardGroups(
    const std::vector<Item>& items, const ItemIndex& item_by_name,
    const std::vector<SafetensorsTensorSpec>& all_specs, const Metadata& metadata,
    uint64_t max_shard_size) {
  std::vector<std::vector<SafetensorsTensorSpec>> groups;
  PTD_ASSIGN_OR_RETURN(SafetensorsLayout whole, PlanSafetensors(all_specs, metadata));
  uint64_t current = 0;
  for (const SafetensorsTensor& t : whole.tensors) {
    if (groups.empty() || (current > 0 && current + t.nbytes() > max_shard_size)) {
      groups.emplace_back();
      current = 0;
    }
    const Item& it = items[item_by_name.at(t.name)];
    groups.back().push_back({it.name, it.dtype, it.shape});
    current += t.nbytes();
  }
  if (groups.empty()) groups.emplace_back();  // No tensors: one empty shard.
  return groups;
}

// One file at `out`, or shards in the folder `out` (created when missing, and
// then removed by `cleanup` on failure).
absl::StatusOr<FilePlan> PlanFiles(const std::vector<Item>& items, const ItemIndex& item_by_name,
                                   const Metadata& metadata, const std::string& out,
                                   const ExtractOptions& options, Cleanup* cleanup) {
  std::vector<SafetensorsTensorSpec> all_specs;
  all_specs.reserve(items.size());
  for (const Item& it : items) all_specs.push_back({it.name, it.dtype, it.shape});
  FilePlan plan;
  if (!options.max_shard_size) {
    plan.groups.push_back(std::move(all_specs));
    plan.paths.push_back(out);
    return plan;
  }
  PTD_ASSIGN_OR_RETURN(
      plan.groups, ShardGroups(items, item_by_name, all_specs, metadata, *options.max_shard_size));
  std::error_code ec;
  if (!std::filesystem::is_directory(out, ec)) {
    if (!std::filesystem::create_directories(out, ec) || ec) {
      return absl::PermissionDeniedError(
          absl::StrCat(out, ": cannot create the folder: ", ec.message()));
    }
    cleanup->SetDir(out);
  }
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    plan.paths.push_back(absl::StrCat(out, "/", ShardFileName(i + 1, plan.groups.size())));
  }
  return plan;
}

// What writing the files needs, shared by every file.
struct WriteContext {
  const Container& container;
  const std::vector<Item>& items;
  const ItemIndex& item_by_name;
  const ExtractOptions& options;
  const SourceFiles& files;
  const std::vector<std::string>& placeholders;  // Digests of the right length.
  SourceDigests& digests;
  ExtractResult& result;
  uint64_t buffer_bytes = 0;
  std::vector<uint8_t> chunk;  // Raw reads (key mode).
};

// Calls `sink` with the item's bytes: its view gathered row-major, or its raw
// bytes read in chunks.
absl::Status EmitItem(WriteContext& ctx, const Item& it,
                      const std::function<void(absl::Span<const uint8_t>)>& sink) {
  if (it.weight != nullptr) {
    return GatherView(ctx.container.source(), it.storage_offset, it.storage_nbytes,
                      it.weight->view(), sink);
  }
  ctx.chunk.resize(std::min<uint64_t>(kReadChunk, std::max<uint64_t>(it.nbytes, 1)));
  for (uint64_t at = 0; at < it.nbytes;) {
    const uint64_t n = std::min<uint64_t>(ctx.chunk.size(), it.nbytes - at);
    PTD_RETURN_IF_ERROR(
        ctx.container.source().ReadAt(it.storage_offset + at, absl::MakeSpan(ctx.chunk.data(), n)));
    sink(absl::MakeConstSpan(ctx.chunk.data(), n));
    at += n;
  }
  return absl::OkStatus();
}

// Appends tensor `t` of the file at `path`; its statistics when asked for.
absl::Status WriteTensor(WriteContext& ctx, const SafetensorsTensor& t, const std::string& path,
                         Appender& appender) {
  const Item& it = ctx.items[ctx.item_by_name.at(t.name)];
  ExtractedTensor& rt = ctx.result.tensors[it.result_index];
  rt.file = path;
  std::optional<WeightStatsAccumulator> acc;
  if (ctx.options.stats && IsStatsDtype(it.dtype->scalar_type)) {
    acc.emplace(it.dtype->scalar_type);
  }
  absl::Status sink_status;
  uint64_t emitted = 0;
  const auto sink = [&](absl::Span<const uint8_t> bytes) {
    emitted += bytes.size();
    if (acc) acc->Add(bytes);
    if (sink_status.ok()) sink_status = appender.Add(bytes);
  };
  PTD_RETURN_IF_ERROR(EmitItem(ctx, it, sink));
  PTD_RETURN_IF_ERROR(sink_status);
  if (emitted != t.nbytes()) {
    return absl::InternalError(
        absl::StrCat("tensor '", t.name, "': gathered ", emitted, " bytes, expected ", t.nbytes()));
  }
  if (acc) {
    rt.stats = acc->stats();
    ReportWeightStats(
        *rt.stats,
        Where{.file = ctx.container.path(),
              .fqn = it.name,
              .source = it.source.empty() ? std::nullopt : std::optional<std::string>(it.source)},
        &ctx.result.report);
  }
  return absl::OkStatus();
}

// Writes one safetensors file: the header with placeholder digests, the
// tensors, then the header again with the real digests (the same length).
absl::Status WriteOneFile(WriteContext& ctx, const std::string& path,
                          const std::vector<SafetensorsTensorSpec>& group) {
  PTD_ASSIGN_OR_RETURN(SafetensorsLayout layout,
                       PlanSafetensors(group, MakeMetadata(ctx.files, ctx.placeholders)));
  return WriteFileAtomicallyAt(
      path, [&](const WriteFn& append, const WriteAtFn& write_at) -> absl::Status {
        PTD_RETURN_IF_ERROR(append(layout.header));
        Appender appender(append, ctx.buffer_bytes);
        for (const SafetensorsTensor& t : layout.tensors) {
          PTD_RETURN_IF_ERROR(WriteTensor(ctx, t, path, appender));
        }
        PTD_RETURN_IF_ERROR(appender.Flush());
        PTD_ASSIGN_OR_RETURN(std::vector<std::string> real, ctx.digests.Get());
        PTD_ASSIGN_OR_RETURN(SafetensorsLayout final_layout,
                             PlanSafetensors(group, MakeMetadata(ctx.files, real)));
        if (final_layout.header.size() != layout.header.size()) {
          return absl::InternalError("the safetensors header changed size with the digests");
        }
        return write_at(0, final_layout.header);
      });
}

// The shard index (`model.safetensors.index.json`) in the folder `out`.
absl::Status WriteShardIndex(const std::string& out, ExtractResult* result) {
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (const ExtractedTensor& t : result->tensors) {
    weight_map[t.name] = std::filesystem::path(t.file).filename().string();
    total += t.nbytes;
  }
  const nlohmann::json index{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  const std::string index_path = absl::StrCat(out, "/", Sv(kShardIndexFileName));
  PTD_RETURN_IF_ERROR(WriteFileAtomically(
      index_path, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
  result->files.push_back(index_path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExtractResult> ExtractWeights(const BundlePaths& inputs, const std::string& out,
                                             const ExtractOptions& options) {
  BundlePaths paths = inputs;
  paths.use_mmap = false;  // pread: RSS stays bounded whatever the file size.
  PTD_ASSIGN_OR_RETURN(WeightBundle bundle, WeightBundle::Open(paths));
  const Container& container = *bundle.container();

  // The source files, hashed beside the extraction.
  SourceFiles files{{"ptd", paths.ptd}};
  if (paths.manifest) files.emplace_back("manifest", *paths.manifest);
  if (paths.pte) files.emplace_back("pte", *paths.pte);
  SourceDigests digests(files);

  ExtractResult result;
  std::vector<Item> items;
  if (bundle.weights()) {
    PTD_RETURN_IF_ERROR(CollectWeightItems(*bundle.weights(), container, &items, &result));
  } else {
    items = KeyItems(container);
  }
  const ItemIndex item_by_name = IndexItems(&items, &result);

  const std::vector<std::string> placeholders(files.size(), std::string(kDigestHexSize, '0'));
  Cleanup cleanup;
  PTD_ASSIGN_OR_RETURN(
      FilePlan plan,
      PlanFiles(items, item_by_name, MakeMetadata(files, placeholders), out, options, &cleanup));

  WriteContext ctx{
      .container = container,
      .items = items,
      .item_by_name = item_by_name,
      .options = options,
      .files = files,
      .placeholders = placeholders,
      .digests = digests,
      .result = result,
      .buffer_bytes = std::min<uint64_t>(options.memory_budget / 2, uint64_t{4} << 20)};
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const std::string& path = plan.paths[g];
    PTD_RETURN_IF_ERROR(WriteOneFile(ctx, path, plan.groups[g]));
    cleanup.AddFile(path);
    result.files.push_back(path);
  }
  if (options.max_shard_size) PTD_RETURN_IF_ERROR(WriteShardIndex(out, &result));
  PTD_RETURN_IF_ERROR(digests.Get().status());
  cleanup.Done();
  return result;
}

}  // namespace ptd
