#include "runtime/loader/signed_load.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ptd::internal {

absl::StatusOr<std::unique_ptr<SignedLoad>> BeginSignedLoad(
    const SignatureOptions& options, size_t threads, const ByteSource& source,
    absl::Span<const std::string> other_paths, SignatureReport* report) {
  if (!options.enabled()) return nullptr;
  report->checked = true;
  report->signature = options.signature;
  const FileSource* file = source.LocatedFile();
  if (file == nullptr) {
    return report->Fail(absl::InvalidArgumentError(
        absl::StrCat(source.name(),
                     ": LoadOptions::signature needs weights read from a file (LoadWeights of "
                     "paths or of a bundle); this source reads none")));
  }
  report->model_dir = SignedModelDir(options, file->name());
  auto load = std::make_unique<SignedLoad>();
  load->file = file;
  load->report = report;
  absl::StatusOr<ModelSignature> sig = ModelSignature::Open(options, report->model_dir);
  if (!sig.ok()) return report->Fail(sig.status());
  load->signature = std::make_unique<ModelSignature>(*std::move(sig));
  DescribeSignature(*load->signature, report);
  std::vector<std::string> read_paths{file->name()};
  read_paths.insert(read_paths.end(), other_paths.begin(), other_paths.end());
  absl::Status st = CheckSignatureCovers(*load->signature, read_paths, report);
  if (!st.ok()) return st;
  const std::string name = *load->signature->RelativeName(file->name());
  load->entry = load->signature->Find(name);
  // Every other file now, before a byte of the .ptd is loaded.
  st = CheckSignedFolder(*load->signature, {name}, threads, report);
  if (!st.ok()) return st;
  return load;
}

}  // namespace ptd::internal
