#include "ptd/verify.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/checked_math.h"
#include "ptd/scalar_type.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/program.h"
#include "ptd/container.h"
#include "ptd/checkpoint.h"
#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_set.h"

namespace ptd {
namespace {

using json = nlohmann::ordered_json;

// An empty object with room for `fields` members. ordered_json keeps its
// members in a vector of pair<const string, json>, whose elements are copied,
// not moved, when it grows (the const key has no noexcept move): an object
// built member by member without this deep-copies its members log2(n) times.
json Object(size_t fields) {
  json j = json::object();
  j.get_ref<json::object_t&>().reserve(fields);
  return j;
}

json LayoutJson(const TensorLayout* l) {
  if (!l) return nullptr;
  json j = Object(3);
  j["scalar_type"] = l->scalar_type;
  j["sizes"] = l->sizes;
  j["dim_order"] = l->dim_order;
  return j;
}

// How many of `n` keys or weights the report lists.
size_t Listed(size_t n, const VerifyOptions& options) {
  return options.list_limit == 0 ? n : std::min(n, options.list_limit);
}

// Digest progress: items (keys and weights) done out of the total.
struct Progress {
  const VerifyOptions* options = nullptr;
  uint64_t done = 0, total = 0;
  void Tick() {
    if (options->digest && options->digest_progress) options->digest_progress(++done, total);
  }
};

// Keeps the first read failure: a file that cannot be read (it shrank, an
// I/O error) is exit code 2, never a digest silently left out.
void NoteReadFailure(const absl::Status& s, std::optional<std::string>* io_error) {
  if (!s.ok() && !io_error->has_value()) *io_error = std::string(s.message());
}

json ContainerJson(const std::string& path, const FileSource* source,
                   const Container* c, const VerifyOptions& options,
                   std::optional<std::string>* io_error, Progress* progress = nullptr) {
  // Room for every member (see Object): a member added past the capacity
  // would copy the key and segment lists.
  json j = Object(12);
  j["path"] = path;
  j["size"] = source ? json(source->size()) : json(nullptr);
  if (c == nullptr) {
    for (const char* k : {"version", "segment_base_offset", "segment_data_size"}) {
      j[k] = nullptr;
    }
    // Not parsed: unknown, not empty (SPEC section 6: what cannot be
    // computed is null).
    j["segments"] = nullptr;
    j["named_data"] = nullptr;
    return j;
  }
  j["version"] = c->version();
  j["segment_base_offset"] = c->header().segment_base_offset;
  j["segment_data_size"] = c->header().segment_data_size;
  j["segment_alignment_observed"] = c->ObservedSegmentAlignment();
  const size_t segments = c->segments().size();
  const size_t listed_segments = Listed(segments, options);
  json segs = json::array();
  segs.get_ref<json::array_t&>().reserve(listed_segments);
  for (size_t i = 0; i < listed_segments; ++i) {
    const Segment& s = c->segments()[i];
    json one = Object(2);
    one["offset"] = s.offset;
    one["size"] = s.size;
    segs.push_back(std::move(one));
  }
  j["segments"] = std::move(segs);
  if (listed_segments < segments) j["segment_count"] = segments;
  const size_t keys = c->named_data().size();
  const size_t listed = Listed(keys, options);
  json named = json::array();
  named.get_ref<json::array_t&>().reserve(listed);
  for (size_t i = 0; i < keys; ++i) {
    // Past the listed keys only digests remain to be taken (their warnings
    // and read errors count); without them the loop is done.
    if (i >= listed && !options.digest) break;
    const NamedDataEntry& e = c->named_data()[i];
    // key, segment_index, size, layout, file_offset, sha256; ptd-load adds
    // loaded and sha256.
    json n = Object(7);
    n["key"] = e.key;
    n["segment_index"] = e.segment_index;
    const auto size = c->SegmentSize(e);
    n["size"] = size ? json(*size) : json(nullptr);
    n["layout"] = LayoutJson(e.layout);
    // A cut-short report may not list the key's segment: its file offset
    // is given here instead.
    if (listed_segments < segments && e.segment_index < segments) {
      n["file_offset"] = c->SegmentFileOffset(e.segment_index);
    }
    if (options.digest) {
      json sha = nullptr;
      if (size && c->segments()[e.segment_index].in_bounds) {
        auto d = DigestRange(c->source(), c->SegmentFileOffset(e.segment_index),
                             *size);
        if (d.ok()) {
          sha = *d;
        } else {
          NoteReadFailure(d.status(), io_error);
        }
      }
      n["sha256"] = sha;
      if (progress != nullptr) progress->Tick();
    }
    if (i < listed) named.push_back(std::move(n));
  }
  j["named_data"] = std::move(named);
  if (listed < keys) j["named_data_count"] = keys;
  return j;
}

json VariantJson(const Variant& v) {
  return json{{"target_sm", v.target_sm},
              {"ptx_compute", v.ptx_compute},
              {"fallback_only", v.fallback_only()},
              {"so_blob_key", v.so_blob_key}};
}

json WeightJson(const WeightEntry& e, const ResolvedWeight* w,
                const Container* c, const std::string& source,
                const VerifyOptions& options, Report* report,
                std::optional<std::string>* io_error) {
  // Eleven members here; ptd-load adds loaded, sha256, materialized_sha256.
  json j = Object(14);
  j["fqn"] = e.fqn;
  j["storage_key"] = e.storage_key;
  j["dtype"] = e.dtype;
  j["device_type"] = e.device_type;
  j["storage_offset"] = e.storage_offset;
  j["sizes"] = e.sizes;
  j["strides"] = e.strides;
  j["storage_nbytes"] = e.storage_nbytes;
  if (w != nullptr && w->extent) {
    j["required_nbytes"] = w->extent->required_nbytes;
  } else {
    j["required_nbytes"] = nullptr;
  }
  // A cut-short report may not list the weight's key: the size of the
  // segment behind it is given here instead.
  if (c != nullptr && w != nullptr && w->named != nullptr &&
      Listed(c->named_data().size(), options) < c->named_data().size()) {
    const auto size = c->SegmentSize(*w->named);
    j["segment_size"] = size ? json(*size) : json(nullptr);
  }
  // SPEC section 2: no stored bytes, so never a digest.
  j["runtime_owned"] = e.runtime_owned();
  const bool stats = options.stats && IsStatsDtype(e.dtype);
  if (!options.digest && !stats) return j;
  json sha = nullptr;
  json stats_json = nullptr;
  if (w != nullptr && w->ok && !w->runtime_owned && w->named != nullptr && c != nullptr) {
    const ViewSpec view = w->view();
    const auto gathered = internal::CheckedMul(w->extent->numel, view.element_size);
    const Where where{.file = c->path(), .key = std::string(e.storage_key),
                      .fqn = std::string(e.fqn), .source = source};
    if (!gathered || *gathered > options.digest_limit) {
      report->Warning(
          "D1",
          absl::StrCat("weight '", internal::Sv(e.fqn), "': the view gathers ",
                       gathered ? absl::StrCat(*gathered) : "over 2^64",
                       " bytes, over the digest limit of ", options.digest_limit,
                       options.digest && stats ? "; no sha256 and no stats"
                       : options.digest        ? "; no sha256"
                                               : "; no stats"),
          where);
    } else {
      // One pass over the view's elements feeds both the digest and the
      // health scan (N1).
      const uint32_t seg = w->named->segment_index;
      Sha256 hash;
      std::optional<WeightStatsAccumulator> acc;
      if (stats) acc.emplace(e.dtype);
      const absl::Status gather = GatherView(
          c->source(), c->SegmentFileOffset(seg), c->segments()[seg].size, view,
          [&](absl::Span<const uint8_t> chunk) {
            if (options.digest) hash.Update(chunk);
            if (acc) acc->Add(chunk);
          });
      if (gather.ok()) {
        if (options.digest) sha = hash.HexDigest();
        if (acc) {
          const WeightStats& st = acc->stats();
          stats_json = Object(4);
          stats_json["nan"] = st.nan;
          stats_json["inf"] = st.inf;
          stats_json["min"] = st.min ? json(*st.min) : json(nullptr);
          stats_json["max"] = st.max ? json(*st.max) : json(nullptr);
          ReportWeightStats(st, where, report);
        }
      } else {
        NoteReadFailure(gather, io_error);
      }
    }
  }
  if (options.digest) j["sha256"] = sha;
  if (stats) j["stats"] = std::move(stats_json);
  return j;
}

}  // namespace

json DiagnosticJson(const Diagnostic& d) {
  json j{{"rule", d.rule},
         {"message", d.message},
         {"code", absl::StatusCodeToString(d.code)}};
  if (!d.file.empty()) j["file"] = d.file;
  if (d.key) j["key"] = *d.key;
  if (d.fqn) j["fqn"] = *d.fqn;
  if (d.segment) j["segment"] = *d.segment;
  if (d.source) j["source"] = *d.source;
  return j;
}

namespace {

json ManifestJson(const SourcedManifest& s, const ResolvedManifest* resolved,
                  const Container* container, const VerifyOptions& options,
                  Report* report, std::optional<std::string>* io_error,
                  Progress* progress) {
  // source, format, variants, selection, weights, weight_count, file.
  json one = Object(8);
  one["source"] = s.source;
  one["format"] = std::string(ManifestFormatName(s.manifest.format));
  json variants = json::array();
  for (const Variant& v : s.manifest.variants) variants.push_back(VariantJson(v));
  one["variants"] = std::move(variants);
  if (options.sm) {
    json sel{{"sm", *options.sm}};
    auto choice = SelectVariant(s.manifest.variants, *options.sm);
    if (choice.ok()) {
      sel["variant"] = choice->index;
      sel["via_ptx"] = choice->via_ptx;
      sel["so_blob_key"] = s.manifest.variants[choice->index].so_blob_key;
    } else {
      sel["variant"] = nullptr;
      sel["message"] = std::string(choice.status().message());
    }
    one["selection"] = std::move(sel);
  }
  const size_t weights = s.manifest.entries.size();
  const size_t listed = Listed(weights, options);
  json wj = json::array();
  wj.get_ref<json::array_t&>().reserve(listed);
  for (size_t i = 0; i < weights; ++i) {
    // Past the listed weights, only their digests and stats (and D1 and
    // N1 warnings) remain.
    if (i >= listed && !options.digest && !options.stats) break;
    const ResolvedWeight* w = resolved ? &resolved->weights[i] : nullptr;
    json one_weight = WeightJson(s.manifest.entries[i], w, container, s.source, options,
                                 report, io_error);
    if (i < listed) wj.push_back(std::move(one_weight));
    progress->Tick();
  }
  one["weights"] = std::move(wj);
  if (listed < weights) one["weight_count"] = weights;
  return one;
}

json DiagnosticsJson(const std::vector<Diagnostic>& ds) {
  json out = json::array();
  for (const Diagnostic& d : ds) out.push_back(DiagnosticJson(d));
  return out;
}

// The I1 error of an input that cannot be opened or read.
json InputErrorJson(const absl::Status& s, const std::string& file) {
  json j{{"rule", kInputRule},
         {"message", absl::StrCat(s.message(), " (", kInputRule, ")")},
         {"code", absl::StatusCodeToString(s.code())}};
  if (!file.empty()) j["file"] = file;
  return j;
}

// The input whose name a read error's message starts with ("" if none).
std::string FileOfMessage(std::string_view message, const BundleSources& sources) {
  for (const auto* s : {sources.ptd.get(), sources.manifest.get(), sources.pte.get()}) {
    if (s != nullptr && absl::StartsWith(internal::Sv(message), s->name())) return s->name();
  }
  return "";
}

enum class FileKind { kUnknown, kPtd, kPte, kManifest };

// What the first bytes of `source` say it is.
FileKind SniffKind(const FileSource& source) {
  uint8_t head[16] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(head), source.size()));
  if (!source.ReadAt(0, absl::MakeSpan(head, n)).ok()) return FileKind::kUnknown;
  const std::string_view b(reinterpret_cast<const char*>(head), n);
  if (absl::StartsWith(internal::Sv(b), internal::Sv(kManifestMagicPrefix))) return FileKind::kManifest;
  if (n >= 12 && b.substr(4, 4) == "FT01" && b.substr(8, 4) == "FH01") return FileKind::kPtd;
  if (n >= 8 && b.substr(4, 4) == "ET12") return FileKind::kPte;
  return FileKind::kUnknown;
}

// A hint for a file given in the wrong place, or "".
std::string WrongPlaceHint(const FileSource& source, FileKind expected) {
  const FileKind kind = SniffKind(source);
  if (kind == FileKind::kUnknown || kind == expected) return "";
  switch (kind) {
    case FileKind::kManifest: {
      uint8_t magic[10] = {};
      (void)source.ReadAt(0, absl::MakeSpan(magic, std::min<uint64_t>(10, source.size())));
      return absl::StrCat("this is a CUDA weight manifest (",
                          internal::Escaped(std::string_view(
                              reinterpret_cast<const char*>(magic), sizeof(magic))),
                          "): pass it with --manifest");
    }
    case FileKind::kPtd:
      return "this is a .ptd weight container (FlatTensor 'FT01'): pass it as the FILE.ptd "
             "argument";
    case FileKind::kPte:
      return "this is an ExecuTorch program (.pte, 'ET12'): pass it with --pte";
    case FileKind::kUnknown:
      break;
  }
  return "";
}

// Adds a hint to the first error about `source` when the file looks like
// another kind than `expected`. Reads the file only when it has an error.
void AttachHint(json& errors, const FileSource& source, FileKind expected) {
  for (json& e : errors) {
    if (e.contains("file") && e["file"] == source.name()) {
      const std::string hint = WrongPlaceHint(source, expected);
      if (!hint.empty()) e["hint"] = hint;
      return;
    }
  }
}

}  // namespace

VerifyOutcome RunVerify(const VerifyOptions& options) {
  // Open every input first: a file that cannot be read is exit code 2.
  BundleSources sources;
  std::optional<std::string> io_error;
  json io_errors = json::array();
  const auto open = [&](const std::string& path,
                        std::shared_ptr<const FileSource>* dst) {
    auto s = OpenFile(path, options.use_mmap);
    if (!s.ok()) {
      if (!io_error) io_error = std::string(s.status().message());
      io_errors.push_back(InputErrorJson(s.status(), path));
      return;
    }
    *dst = std::move(*s);
  };
  open(options.ptd_path, &sources.ptd);
  if (options.manifest_path) open(*options.manifest_path, &sources.manifest);
  if (options.pte_path) open(*options.pte_path, &sources.pte);
  if (io_error) {
    VerifyOutcome out;
    out.io_error = io_error;
    out.json = json{{"ok", false},
                    {"error", *out.io_error},
                    {"ptd", ContainerJson(options.ptd_path, sources.ptd.get(),
                                          nullptr, options, &io_error)},
                    {"manifests", json::array()},
                    {"errors", std::move(io_errors)},
                    {"warnings", json::array()}};
    return out;
  }
  return RunVerify(options, sources);
}

VerifyOutcome RunVerify(const VerifyOptions& options, const BundleSources& sources) {
  VerifyOutcome out;
  Report& report = out.report;
  auto verified = std::make_shared<WeightBundle>(WeightBundle::Verify(sources, &report));
  const WeightBundle& bundle = *verified;
  if (bundle.io_error()) out.io_error = std::string(bundle.io_error()->message());

  Progress progress{.options = &options};
  if (bundle.container()) progress.total += bundle.container()->named_data().size();
  for (const SourcedManifest& s : bundle.manifests()) progress.total += s.manifest.entries.size();

  // ok, ptd, manifests, errors, warnings, error; ptd-load adds device,
  // load, runtime_owned, timings, materialized and repeat. With room for
  // all, the weight lists are never copied when a member is added.
  json j = Object(16);
  j["ok"] = false;  // Set below, after digests may add warnings.
  j["ptd"] = ContainerJson(options.ptd_path, sources.ptd.get(), bundle.container(),
                           options, &out.io_error, &progress);
  json mj = json::array();
  for (size_t m = 0; m < bundle.manifests().size(); ++m) {
    const ResolvedManifest* resolved =
        bundle.weights() ? &bundle.weights()->manifests()[m] : nullptr;
    mj.push_back(ManifestJson(bundle.manifests()[m], resolved, bundle.container(),
                              options, &report, &out.io_error, &progress));
    // The file the manifest came from (the --manifest file, or the .pte).
    if (!bundle.manifests()[m].file.empty()) mj.back()["file"] = bundle.manifests()[m].file;
  }
  j["manifests"] = std::move(mj);
  j["ok"] = report.ok() && !out.io_error;
  j["errors"] = DiagnosticsJson(report.errors());
  j["warnings"] = DiagnosticsJson(report.warnings());
  if (out.io_error) {
    j["error"] = *out.io_error;
    const absl::Status st = bundle.io_error() ? *bundle.io_error()
                                              : absl::DataLossError(*out.io_error);
    j["errors"].push_back(InputErrorJson(st, FileOfMessage(*out.io_error, sources)));
  }
  // A file given in the wrong place says what it looks like.
  if (sources.ptd) AttachHint(j["errors"], *sources.ptd, FileKind::kPtd);
  if (sources.manifest) AttachHint(j["errors"], *sources.manifest, FileKind::kManifest);
  if (sources.pte) AttachHint(j["errors"], *sources.pte, FileKind::kPte);
  out.json = std::move(j);
  out.bundle = std::move(verified);
  return out;
}

namespace {

char g_fault_message[1280];
size_t g_fault_message_len = 0;

void OnSigbus(int /*sig*/) {
  // Only async-signal-safe calls here.
  ssize_t ignored = ::write(STDERR_FILENO, g_fault_message, g_fault_message_len);
  (void)ignored;
  ::_exit(2);
}

}  // namespace

void ExitOnMappedFileFault(const std::string& what) {
  const std::string msg = absl::StrCat(
      "ptd-verify: a mapped input file shrank while it was being read (SIGBUS): ",
      what.substr(0, 1024), "; the file changed during verification (run without --mmap "
      "to read it with pread)\n");
  g_fault_message_len = std::min(msg.size(), sizeof(g_fault_message));
  std::memcpy(g_fault_message, msg.data(), g_fault_message_len);
  struct sigaction sa {};
  sa.sa_handler = OnSigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace ptd
