#include "ptd/weight_bundle.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

#include "runtime/internal/status_macros.h"

namespace ptd {
namespace {

// A standalone manifest is read whole; larger files are refused (exit 2)
// rather than allocated. 2^20 entries of 1 KiB each fit.
constexpr uint64_t kMaxManifestFileBytes = uint64_t{1} << 30;

// From this size (about 4,000 entries) the manifest is decoded beside the
// container; below it a thread costs more than it saves.
constexpr uint64_t kDecodeManifestOnAThreadBytes = uint64_t{256} << 10;

bool IsSupportedManifestMagic(absl::Span<const uint8_t> head) {
  const std::string_view magic(reinterpret_cast<const char*>(head.data()), head.size());
  return magic == kManifestMagicFqn0 || magic == kManifestMagicFqn3;
}

}  // namespace

absl::StatusOr<BundleSources> OpenBundleSources(const BundlePaths& paths) {
  BundleSources sources;
  PTD_ASSIGN_OR_RETURN(sources.ptd, OpenFile(paths.ptd, paths.use_mmap));
  if (paths.manifest) {
    PTD_ASSIGN_OR_RETURN(sources.manifest, OpenFile(*paths.manifest, paths.use_mmap));
  }
  if (paths.pte) {
    PTD_ASSIGN_OR_RETURN(sources.pte, OpenFile(*paths.pte, paths.use_mmap));
  }
  return sources;
}

void WeightBundle::ReadManifestFile(const FileSource& source, Report* report) {
  manifest_path_ = source.name();
  const Where where{.file = source.name(), .source = std::string(kStandaloneManifestSource)};
  // The magic first: a file that is no manifest (a 100 GiB sparse file, a
  // .ptd) is M1/M2 from its first bytes, never read whole.
  auto head = ReadBytes(source, 0, std::min<uint64_t>(source.size(), kManifestMagicFqn0.size()));
  if (!head.ok()) {
    if (!io_error_) io_error_ = head.status();
    return;
  }
  if (!IsSupportedManifestMagic(head->span())) {
    (void)DecodeManifest(head->span(), where, report);  // Reports M1 or M2.
    return;
  }
  // A manifest is read whole, so its size is bounded.
  if (source.size() > kMaxManifestFileBytes) {
    if (!io_error_) {
      io_error_ = absl::ResourceExhaustedError(absl::StrCat(
          source.name(), ": the manifest is ", source.size(), " bytes, over the ",
          kMaxManifestFileBytes, "-byte (1 GiB) limit on a manifest this reader accepts"));
    }
    return;
  }
  auto bytes = ReadBytes(source, 0, source.size());
  if (!bytes.ok()) {
    if (!io_error_) io_error_ = bytes.status();
    return;
  }
  // An owned buffer is kept by the manifest, whose names view it; a view
  // (of a mapping) is not, so the names are copied.
  const absl::Span<const uint8_t> span = bytes->span();
  std::shared_ptr<const Bytes> owner;
  if (!bytes->borrowed()) owner = std::make_shared<const Bytes>(*std::move(bytes));
  if (auto m = DecodeManifest(span, owner, where, report)) {
    manifests_->push_back({std::string(kStandaloneManifestSource), std::move(*m), source.name()});
  }
}

void WeightBundle::ReadProgram(std::shared_ptr<const FileSource> source, Report* report) {
  program_ = Program::Verify(std::move(source), report);
  if (!program_) return;
  for (const CudaDelegate& d : program_->cuda_delegates()) {
    if (!d.is_manifest) continue;  // Legacy payload: P4, reported.
    if (auto m = DecodeManifest(d.payload.span(),
                                Where{.file = program_->path(), .source = d.source}, report)) {
      manifests_->push_back({d.source, std::move(*m), program_->path()});
    }
  }
}

void WeightBundle::CheckLibraryKeys(Report* report) const {
  if (!program_) return;
  const absl::flat_hash_set<std::string_view> pte_keys(program_->named_data_keys().begin(),
                                                       program_->named_data_keys().end());
  for (const SourcedManifest& s : *manifests_) {
    if (s.source == kStandaloneManifestSource) continue;
    for (size_t i = 0; i < s.manifest.variants.size(); ++i) {
      const std::string& key = s.manifest.variants[i].so_blob_key;
      if (key.empty() || pte_keys.contains(key) ||
          (container_ && container_->Find(key) != nullptr)) {
        continue;
      }
      report->Error("P3", absl::StatusCode::kNotFound,
                    absl::StrCat(s.source, " variant ", i, ": so_blob_key '", key,
                                 "' is named data in neither the .pte nor the .ptd"),
                    Where{.file = program_->path(), .key = key, .source = s.source});
    }
  }
}

WeightBundle WeightBundle::Verify(const BundleSources& sources, Report* report) {
  WeightBundle b;
  // Independent until resolution: a large manifest is decoded on a thread
  // of its own while the container is verified. Its diagnostics follow the
  // container's, as when run one after the other, and what the thread
  // throws (std::bad_alloc) is rethrown here.
  const bool beside =
      sources.ptd && sources.manifest && sources.manifest->size() >= kDecodeManifestOnAThreadBytes;
  Report manifest_report;
  std::exception_ptr thrown;
  {
    std::jthread manifest_thread;  // Joined at the end of this block.
    if (beside) {
      manifest_thread = std::jthread([&] {
        try {
          b.ReadManifestFile(*sources.manifest, &manifest_report);
        } catch (...) {
          thrown = std::current_exception();
        }
      });
    }
    if (sources.ptd) b.container_ = Container::Verify(sources.ptd, report);
  }
  if (thrown) std::rethrow_exception(thrown);
  if (beside) {
    report->Merge(std::move(manifest_report));
  } else if (sources.manifest) {
    b.ReadManifestFile(*sources.manifest, report);
  }
  if (sources.pte) b.ReadProgram(sources.pte, report);
  b.CheckLibraryKeys(report);
  if (!b.manifests_->empty()) {
    b.weights_ = b.container_ ? WeightSet::Resolve(*b.container_, *b.manifests_, report)
                              : WeightSet::CheckWithoutContainer(*b.manifests_, report);
  }
  return b;
}

WeightBundle WeightBundle::Verify(const BundlePaths& paths, Report* report) {
  absl::StatusOr<BundleSources> sources = OpenBundleSources(paths);
  // One named result, returned once (elided): GCC 12 under -fsanitize=thread
  // warns (maybe-uninitialized) on moving a bundle whose weights are unset.
  WeightBundle b = sources.ok() ? Verify(*sources, report) : WeightBundle();
  if (!sources.ok()) b.io_error_ = sources.status();
  return b;
}

absl::StatusOr<WeightBundle> WeightBundle::Open(const BundleSources& sources) {
  if (!sources.ptd) return absl::InvalidArgumentError("WeightBundle: no .ptd source");
  Report report;
  WeightBundle b = Verify(sources, &report);
  if (b.io_error_) return *b.io_error_;
  PTD_RETURN_IF_ERROR(report.FirstError());
  return b;
}

absl::StatusOr<WeightBundle> WeightBundle::Open(const BundlePaths& paths) {
  PTD_ASSIGN_OR_RETURN(BundleSources sources, OpenBundleSources(paths));
  return Open(sources);
}

}  // namespace ptd
