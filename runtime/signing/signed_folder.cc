// CheckSignedFolder and VerifySignedModel: the signed folder against its
// signature (A4, A5, A6), as the reference (model_signing 1.1.1) walks it:
// - every path under the folder is looked at, ignored ones included: a
//   symbolic link is refused unless the signature allows them, and so is
//   anything that is neither a file nor a folder (a socket, a pipe);
// - a file not ignored must be listed; a listed file must be there;
// - under "shards", a file of 0 bytes has no shards (and is not listed).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "ptd/file_source.h"
#include "ptd/model_signature.h"
#include "ptd/rules.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/threads.h"
#include "runtime/signing/file_hasher.h"

namespace ptd {

using internal::Sv;

namespace {

namespace fs = std::filesystem;

absl::Status RuleError(std::string_view rule, std::string what) {
  return ptd::RuleError(absl::StatusCode::kDataLoss, rule, what);
}

struct Task {
  size_t file = 0;   // Into report->files (and `listed`).
  size_t shard = 0;  // Into the signed file's shards.
};

// A file of the folder that the signature does not ignore.
struct PresentFile {
  std::string name;
  uint64_t size = 0;
};

// A6 (and the reference's refusals) over the folder's paths: the files not
// ignored. `where` names the folder and its signature in messages.
absl::StatusOr<std::vector<PresentFile>> ListFolder(const ModelSignature& signature,
                                                    const fs::path& dir, const std::string& where) {
  std::vector<PresentFile> present;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    const fs::file_status ls = e.symlink_status(ec);
    if (ec) break;
    fs::file_status st = ls;
    if (fs::is_symlink(ls)) {
      if (!signature.allow_symlinks()) {
        return RuleError("A6", absl::StrCat(where, ": '", rel,
                                            "' is a symbolic link, and the signature does not "
                                            "allow them (allow_symlinks false)"));
      }
      st = e.status(ec);
      if (ec) {
        return RuleError(
            "A6", absl::StrCat(where, ": '", rel, "' is a symbolic link that does not resolve"));
      }
    }
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      return RuleError("A6", absl::StrCat(where, ": '", rel, "' is neither a file nor a folder"));
    }
    if (signature.Ignores(rel)) continue;
    const uint64_t size = fs::file_size(e.path(), ec);
    if (ec) break;
    if (signature.Find(rel) == nullptr) {
      if (signature.sharded() && size == 0) continue;  // No shards to list.
      return RuleError(
          "A6", absl::StrCat(where, ": '", rel,
                             "' is in the folder but the signature neither lists nor ignores it"));
    }
    present.push_back(PresentFile{.name = rel, .size = size});
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(signature.model_dir(), ": cannot list the signed folder: ", ec.message()));
  }
  return present;
}

// A4: every listed file is there, its shards cover it. Fills report->files
// (in the signature's order) and returns the signed files in that order.
absl::StatusOr<std::vector<const SignedFile*>> MatchListed(
    const ModelSignature& signature, const std::vector<PresentFile>& present,
    absl::Span<const std::string> hashed_by_caller, const std::string& where,
    SignatureReport* report) {
  report->files.clear();
  std::vector<const SignedFile*> listed;
  for (const SignedFile& f : signature.files()) {
    const auto p = std::find_if(present.begin(), present.end(),
                                [&](const PresentFile& pf) { return pf.name == f.name; });
    if (p == present.end()) {
      return RuleError("A4",
                       absl::StrCat(where, ": '", f.name, "' is signed but not in the folder"));
    }
    if (const std::optional<uint64_t> signed_size = f.size();
        signed_size && *signed_size != p->size) {
      return RuleError("A4", absl::StrCat(where, ": '", f.name, "' is ", p->size,
                                          " bytes, its signed shards cover ", *signed_size));
    }
    const bool by_caller = std::find(hashed_by_caller.begin(), hashed_by_caller.end(), f.name) !=
                           hashed_by_caller.end();
    report->files.push_back(SignatureReport::File{.name = f.name,
                                                  .bytes = p->size,
                                                  .read = by_caller ? "load" : "apart",
                                                  .ok = false,
                                                  .error = {}});
    listed.push_back(&f);
  }
  return listed;
}

// One shard of `f`, read from `path` through `buf` and hashed (A5).
absl::Status HashShard(const ModelSignature& signature, const SignedFile& f,
                       const SignedFile::Shard& shard, const std::string& path,
                       std::vector<uint8_t>& buf) {
  PTD_ASSIGN_OR_RETURN(std::unique_ptr<FileSource> file, OpenPreadFile(path));
  const uint64_t end = std::min(file->size(), shard.end);
  SignatureDigest d(signature.hash());
  for (uint64_t off = shard.start; off < end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - off));
    PTD_RETURN_IF_ERROR(file->ReadAt(off, absl::MakeSpan(buf.data(), n)));
    d.Update(buf.data(), n);
    off += n;
  }
  if (d.Finish() != shard.digest) return internal::DigestMismatch(signature, f, shard, path);
  return absl::OkStatus();
}

// A5: hashes the shards of the files report->files reads "apart", on up to
// `threads` threads; the first error in shard order, and each file's first
// in shard order in its report (the same from run to run, whichever thread
// finds a bad shard first).
absl::Status HashApart(const ModelSignature& signature, const fs::path& dir,
                       const std::vector<const SignedFile*>& listed, size_t threads,
                       SignatureReport* report) {
  std::vector<Task> tasks;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (report->files[i].read == "load") continue;
    for (size_t k = 0; k < listed[i]->shards.size(); ++k)
      tasks.push_back(Task{.file = i, .shard = k});
  }
  std::vector<std::atomic<size_t>> bad_shards(listed.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status first;  // Guarded by mu: the first error in task order.
  size_t first_task = tasks.size();
  // Guarded by mu: per file, the task of the error its report gives, the
  // first in shard order whichever thread found it first.
  std::vector<size_t> file_first_task(listed.size(), tasks.size());
  const auto work = [&] {
    std::vector<uint8_t> buf(size_t{1} << 20);
    for (;;) {
      const size_t t = next.fetch_add(1);
      if (t >= tasks.size()) return;
      const Task& task = tasks[t];
      const SignedFile& f = *listed[task.file];
      const absl::Status st =
          HashShard(signature, f, f.shards[task.shard], (dir / f.name).string(), buf);
      if (st.ok()) continue;
      bad_shards[task.file].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      if (t < first_task) {
        first_task = t;
        first = st;
      }
      if (t < file_first_task[task.file]) {
        file_first_task[task.file] = t;
        report->files[task.file].error = std::string(st.message());
      }
    }
  };
  internal::RunOnThreads(std::min(threads, tasks.size()), work);
  for (size_t i = 0; i < listed.size(); ++i) {
    if (report->files[i].read == "apart") report->files[i].ok = bad_shards[i].load() == 0;
  }
  return first;
}

}  // namespace

absl::Status CheckSignedFolder(const ModelSignature& signature,
                               absl::Span<const std::string> hashed_by_caller, size_t threads,
                               SignatureReport* report) {
  const fs::path dir(signature.model_dir());
  const std::string where =
      absl::StrCat(signature.model_dir(), " (signed by ", signature.path(), ")");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat(signature.model_dir(), ": the signed model folder is not a folder"));
  }
  absl::StatusOr<std::vector<PresentFile>> present = ListFolder(signature, dir, where);
  if (!present.ok()) {
    // A listing that failed is not a verdict on the signature.
    if (present.status().code() == absl::StatusCode::kUnavailable) return present.status();
    return report->Fail(present.status());
  }
  absl::StatusOr<std::vector<const SignedFile*>> listed =
      MatchListed(signature, *present, hashed_by_caller, where, report);
  if (!listed.ok()) return report->Fail(listed.status());
  const absl::Status hashed = HashApart(signature, dir, *listed, threads, report);
  if (!hashed.ok()) return report->Fail(hashed);
  return absl::OkStatus();
}

void DescribeSignature(const ModelSignature& s, SignatureReport* report) {
  report->method = std::string(s.method());
  report->serialization = std::string(s.serialization());
  report->hash = std::string(SignatureHashName(s.hash()));
  report->shard_size = s.shard_size();
}

absl::Status CheckSignatureCovers(const ModelSignature& signature,
                                  absl::Span<const std::string> read_paths,
                                  SignatureReport* report) {
  for (const std::string& path : read_paths) {
    const std::optional<std::string> name = signature.RelativeName(path);
    if (!name || signature.Find(*name) == nullptr) {
      return report->Fail(RuleError(
          "A4", absl::StrCat(path, ": read, but not covered by the signature ", signature.path(),
                             name ? absl::StrCat(" (it lists no '", *name, "')")
                                  : absl::StrCat(" (outside the signed folder ",
                                                 signature.model_dir(), ")"))));
    }
  }
  return absl::OkStatus();
}

absl::Status VerifySignedModel(const SignatureOptions& options,
                               absl::Span<const std::string> read_paths, size_t threads,
                               SignatureReport* report) {
  SignatureReport local;
  SignatureReport& r = report != nullptr ? *report : local;
  r.checked = true;
  r.signature = options.signature;
  r.model_dir = SignedModelDir(options, read_paths.empty() ? "" : read_paths[0]);
  absl::StatusOr<ModelSignature> sig = ModelSignature::Open(options, r.model_dir);
  if (!sig.ok()) return r.Fail(sig.status());
  DescribeSignature(*sig, &r);
  absl::Status st = CheckSignatureCovers(*sig, read_paths, &r);
  if (st.ok()) st = CheckSignedFolder(*sig, {}, threads, &r);
  if (!st.ok()) return st;
  r.verified = true;
  return absl::OkStatus();
}

}  // namespace ptd
