// RunVerify: opens the inputs, verifies the bundle, lists its keys and
// weights as typed facts, runs the digest pass and notes hints for a file
// given in the wrong place. Rendering is elsewhere (report_format.cc,
// verify_json.cc).
#include "ptd/verify.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/rules.h"
#include "runtime/internal/strings.h"
#include "runtime/ptd/ext_header.h"
#include "runtime/verify/digest_pass.h"
#include "runtime/verify/input_text.h"

namespace ptd {
namespace {

// How many of `n` keys or weights the outcome lists.
size_t Listed(size_t n, const VerifyOptions& options) {
  return options.list_limit == 0 ? n : std::min(n, options.list_limit);
}

void ListContainer(const Container& c, const VerifyOptions& options, VerifiedContainer* out) {
  out->container = &c;
  out->segment_count = c.segments().size();
  out->listed_segments = Listed(out->segment_count, options);
  out->key_count = c.named_data().size();
  // Past the listed keys only digests remain to be taken; they are listed
  // for the digest pass and dropped after it.
  const size_t listed = options.digest ? out->key_count : Listed(out->key_count, options);
  out->keys.reserve(listed);
  for (size_t i = 0; i < listed; ++i) {
    const NamedDataEntry& e = c.named_data()[i];
    VerifiedKey k{.entry = &e, .size = c.SegmentSize(e)};
    if (e.segment_index < out->segment_count) k.file_offset = c.SegmentFileOffset(e.segment_index);
    out->keys.push_back(std::move(k));
  }
}

VerifiedWeight ListWeight(const WeightEntry& e, const ResolvedWeight* w, const Container* c) {
  VerifiedWeight v{.entry = &e,
                   .resolved = w,
                   .runtime_owned = e.runtime_owned(),
                   .stats_dtype = IsStatsDtype(e.dtype)};
  if (w != nullptr && w->extent) v.required_nbytes = w->extent->required_nbytes;
  if (c != nullptr && w != nullptr && w->named != nullptr) {
    v.key = w->named;
    v.segment_size = c->SegmentSize(*w->named);
  }
  return v;
}

VerifiedManifest ListManifest(const SourcedManifest& s, const ResolvedManifest* resolved,
                              const Container* c, const VerifyOptions& options) {
  VerifiedManifest m{.manifest = &s, .weight_count = s.manifest.entries.size()};
  if (options.sm) {
    VerifiedSelection sel{.sm = *options.sm};
    auto choice = SelectVariant(s.manifest.variants, *options.sm);
    if (choice.ok()) {
      sel.choice = *choice;
    } else {
      sel.message = std::string(choice.status().message());
    }
    m.selection = std::move(sel);
  }
  // Past the listed weights only digests and stats remain (listed for the
  // digest pass, dropped after it).
  const size_t listed =
      options.digest || options.stats ? m.weight_count : Listed(m.weight_count, options);
  m.weights.reserve(listed);
  for (size_t i = 0; i < listed; ++i) {
    m.weights.push_back(
        ListWeight(s.manifest.entries[i], resolved ? &resolved->weights[i] : nullptr, c));
  }
  return m;
}

// Drops what the digest pass needed past the listed keys and weights.
void CutToListed(const VerifyOptions& options, VerifyOutcome* out) {
  if (out->ptd.keys.size() > Listed(out->ptd.key_count, options)) {
    out->ptd.keys.resize(Listed(out->ptd.key_count, options));
  }
  for (VerifiedManifest& m : out->manifests) {
    if (m.weights.size() > Listed(m.weight_count, options)) {
      m.weights.resize(Listed(m.weight_count, options));
    }
  }
}

// What the first bytes of `source` say it is: the input it belongs as, or
// nullopt when they say nothing (or cannot be read).
std::optional<InputRole> SniffRole(const FileSource& source, std::string* magic) {
  uint8_t head[16] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(head), source.size()));
  if (!source.ReadAt(0, absl::MakeSpan(head, n)).ok()) return std::nullopt;
  const std::string_view b(reinterpret_cast<const char*>(head), n);
  if (absl::StartsWith(internal::Sv(b), internal::Sv(kManifestMagicPrefix))) {
    *magic = internal::Escaped(b.substr(0, kManifestMagicFqn0.size()));
    return InputRole::kManifest;
  }
  const auto has = [&](size_t at, std::string_view what) {
    return n >= at + what.size() && b.substr(at, what.size()) == what;
  };
  if (has(internal::kFileIdentifierAt, internal::kPtdFileIdentifier) &&
      has(internal::kExtHeaderAt, internal::kPtdHeaderMagic)) {
    return InputRole::kPtd;
  }
  if (has(internal::kFileIdentifierAt, internal::kPteFileIdentifier)) return InputRole::kPte;
  return std::nullopt;
}

// A hint for the first error about `source` when the file looks like
// another kind of input than `expected`. Reads the file only then.
void NoteHint(const std::vector<Diagnostic>& errors, const FileSource& source, InputRole expected,
              std::vector<InputHint>* hints) {
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i].file != source.name()) continue;
    std::string magic;
    const std::optional<InputRole> role = SniffRole(source, &magic);
    if (!role || *role == expected) return;
    switch (*role) {
      case InputRole::kManifest:
        hints->push_back({i, absl::StrCat("this is a CUDA weight manifest (", magic, ")"),
                          InputRole::kManifest});
        break;
      case InputRole::kPtd:
        hints->push_back({i,
                          absl::StrCat("this is a .ptd weight container (FlatTensor '",
                                       internal::Sv(internal::kPtdFileIdentifier), "')"),
                          InputRole::kPtd});
        break;
      case InputRole::kPte:
        hints->push_back({i,
                          absl::StrCat("this is an ExecuTorch program (.pte, '",
                                       internal::Sv(internal::kPteFileIdentifier), "')"),
                          InputRole::kPte});
        break;
    }
    return;
  }
}

// The file of the bundle's I/O error: WeightBundle::Verify reports the .ptd
// and the .pte that cannot be read as rules (H1, P1); only the standalone
// manifest, read whole, is an I/O error.
std::string BundleIoFile(const BundleSources& sources) {
  return sources.manifest ? sources.manifest->name() : std::string();
}

}  // namespace

Diagnostic InputDiagnostic(const InputError& e) {
  return Diagnostic{.severity = Severity::kError,
                    .rule = kInputRule,
                    .code = e.status.code(),
                    .message = absl::StrCat(e.status.message(), " (", kInputRule, ")"),
                    .file = e.file};
}

std::vector<Diagnostic> VerifyOutcome::Errors() const {
  std::vector<Diagnostic> all = report.errors();
  for (const InputError& e : io_errors) all.push_back(InputDiagnostic(e));
  return all;
}

VerifyOutcome RunVerify(const VerifyOptions& options) {
  // Open every input first: a file that cannot be read is exit code 2.
  BundleSources sources;
  std::vector<InputError> failed;
  const auto open = [&](const std::string& path, std::shared_ptr<const FileSource>* dst) {
    auto s = OpenFile(path, options.paths.use_mmap);
    if (!s.ok()) {
      failed.push_back({s.status(), path});
      return;
    }
    *dst = std::move(*s);
  };
  open(options.paths.ptd, &sources.ptd);
  if (options.paths.manifest) open(*options.paths.manifest, &sources.manifest);
  if (options.paths.pte) open(*options.paths.pte, &sources.pte);
  if (failed.empty()) return RunVerify(options, sources);
  VerifyOutcome out;
  out.options = options;
  out.options.digest_progress = nullptr;
  out.ptd.path = options.paths.ptd;
  if (sources.ptd) out.ptd.size = sources.ptd->size();
  out.io_errors = std::move(failed);
  return out;
}

namespace {
// VerifyOptions::signature: a broken A-rule joins the report's errors; a
// signature or key that cannot be read is an input error (exit code 2).
void CheckSignature(const VerifyOptions& options, VerifyOutcome* out) {
  std::vector<std::string> read_paths{options.paths.ptd};
  if (options.paths.manifest) read_paths.push_back(*options.paths.manifest);
  if (options.paths.pte) read_paths.push_back(*options.paths.pte);
  const size_t threads = options.signature_threads != 0
                             ? options.signature_threads
                             : std::max<size_t>(1, std::thread::hardware_concurrency());
  const absl::Status st =
      VerifySignedModel(options.signature, read_paths, threads, &out->signature);
  if (st.ok()) return;
  const absl::string_view m = st.message();
  const std::string_view message(m.data(), m.size());
  if (const std::optional<std::string> rule = RuleOf(st)) {
    out->report.Error(std::string(*rule), st.code(),
                      std::string(message.substr(0, message.size() - rule->size() - 3)),
                      Where{.file = options.signature.signature});
  } else {
    out->io_errors.push_back({st, options.signature.signature});
  }
}
}  // namespace

VerifyOutcome RunVerify(const VerifyOptions& options, const BundleSources& sources) {
  VerifyOutcome out;
  out.options = options;
  out.options.digest_progress = nullptr;
  auto verified = std::make_shared<WeightBundle>(WeightBundle::Verify(sources, &out.report));
  const WeightBundle& bundle = *verified;
  if (bundle.io_error()) out.io_errors.push_back({*bundle.io_error(), BundleIoFile(sources)});

  out.ptd.path = options.paths.ptd;
  if (sources.ptd) out.ptd.size = sources.ptd->size();
  const Container* c = bundle.container();
  if (c != nullptr) ListContainer(*c, options, &out.ptd);
  for (size_t m = 0; m < bundle.manifests().size(); ++m) {
    const ResolvedManifest* resolved =
        bundle.weights() ? &bundle.weights()->manifests()[m] : nullptr;
    out.manifests.push_back(ListManifest(bundle.manifests()[m], resolved, c, options));
  }
  if (std::optional<InputError> read = internal::RunDigestPass(options, c, &out)) {
    if (out.io_errors.empty()) out.io_errors.push_back(*std::move(read));
  }
  CutToListed(options, &out);
  if (options.signature.enabled()) CheckSignature(options, &out);

  // A file given in the wrong place says what it looks like.
  const std::vector<Diagnostic> errors = out.Errors();
  if (sources.ptd) NoteHint(errors, *sources.ptd, InputRole::kPtd, &out.hints);
  if (sources.manifest) NoteHint(errors, *sources.manifest, InputRole::kManifest, &out.hints);
  if (sources.pte) NoteHint(errors, *sources.pte, InputRole::kPte, &out.hints);
  out.bundle = std::move(verified);
  return out;
}

std::string HintText(const InputHint& hint, const InputNames& names) {
  switch (hint.belongs) {
    case InputRole::kManifest:
      return absl::StrCat(hint.what, ": pass it ", names.manifest);
    case InputRole::kPte:
      return absl::StrCat(hint.what, ": pass it ", names.pte);
    case InputRole::kPtd:
      break;
  }
  return absl::StrCat(hint.what, ": pass it ", names.ptd);
}

}  // namespace ptd
