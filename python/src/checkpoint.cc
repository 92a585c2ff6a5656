// extract() and reweight(): weights out to safetensors and a checkpoint in,
// each returned as a dict, or the failure dict of the rule it broke.
#include "ptd/checkpoint.h"

#include <Python.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nanobind/nanobind.h"
#include "nanobind/stl/optional.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "nlohmann/json.hpp"

#include "ptd/report.h"
#include "ptd/rules.h"
#include "ptd/safetensors.h"
#include "ptd/verify.h"
#include "ptd/weight_bundle.h"
#include "python/src/module.h"
#include "runtime/verify/verify_json.h"

namespace ptd_python {
namespace {

std::string_view DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The diagnostic of a failed Status that names a rule, as ptd-verify --json
// writes one: the file its message starts with ("FILE: ...") when that is
// one of `files`, or a safetensors file or index in one of `folders` (a
// shard), else none.
nlohmann::ordered_json StatusDiagnostic(const absl::Status& s, const std::string& rule,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& folders) {
  std::string message(s.message());
  std::string file;
  const size_t colon = message.find(": ");
  if (colon != std::string::npos && colon > 0) {
    const std::string_view prefix = std::string_view(message).substr(0, colon);
    bool known = false;
    for (const std::string& f : files) known = known || (!f.empty() && prefix == f);
    const bool safetensors =
        EndsWith(prefix, ".safetensors") || EndsWith(prefix, ptd::kSafetensorsIndexSuffix);
    for (const std::string& d : folders) known = known || (safetensors && DirName(prefix) == d);
    if (known) {
      file = std::string(prefix);
      message.erase(0, colon + 2);
    }
  }
  nlohmann::ordered_json d{
      {"rule", rule}, {"message", message}, {"code", absl::StatusCodeToString(s.code())}};
  if (!file.empty()) d["file"] = file;
  return d;
}

// A failed extract or reweight: the report dict of the rule it broke (the
// caller raises ptd.VerifyError; a missing shard is S7), or, for a Status
// that names no rule, the exception of its code: OSError for a file that
// cannot be read or written, ValueError for a bad argument, MemoryError.
nb::object FailedCall(const absl::Status& s, const std::vector<std::string>& files,
                      const std::vector<std::string>& folders) {
  const std::string message(s.message());
  const std::optional<std::string> rule = ptd::RuleOf(s);
  // I1: an input that cannot be opened or read is no broken rule of a file.
  if (!rule || *rule == ptd::kInputRule) {
    if (s.code() == absl::StatusCode::kUnavailable) RaiseOSError(s);
    RaiseStatus(s);
  }
  nlohmann::ordered_json j{{"ok", false},
                           {"errors", nlohmann::ordered_json::array()},
                           {"warnings", nlohmann::ordered_json::array()}};
  j["errors"].push_back(StatusDiagnostic(s, std::string(*rule), files, folders));
  return ToPython(j);
}

nlohmann::ordered_json DiagnosticsOf(const std::vector<ptd::Diagnostic>& ds) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ptd::Diagnostic& d : ds) out.push_back(ptd::DiagnosticJson(d));
  return out;
}

std::vector<std::string> Present(std::initializer_list<const std::optional<std::string>*> v) {
  std::vector<std::string> out;
  for (const std::optional<std::string>* p : v) {
    if (p->has_value()) out.push_back(**p);
  }
  return out;
}

// ExtractWeights: {"ok": True, "tensors": [{name, dtype, shape, nbytes,
// file}], "runtime_owned": [fqn], "files": [path], "errors": [],
// "warnings": [...]}; the failure dict of FailedCall when a rule is broken.
nb::object Extract(std::string ptd_path, std::optional<std::string> manifest,
                   std::optional<std::string> pte, std::string out,
                   std::optional<uint64_t> max_shard_size) {
  ptd::ExtractOptions options;
  options.max_shard_size = max_shard_size;
  absl::StatusOr<ptd::ExtractResult> r;
  {
    nb::gil_scoped_release release;
    r = ptd::ExtractWeights(ptd::BundlePaths{.ptd = ptd_path, .manifest = manifest, .pte = pte},
                            out, options);
  }
  if (!r.ok()) {
    std::vector<std::string> files = Present({&manifest, &pte});
    files.push_back(ptd_path);
    files.push_back(out);
    return FailedCall(r.status(), files, {out});
  }
  nlohmann::ordered_json j{{"ok", true}};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const ptd::ExtractedTensor& t : r->tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", t.scalar_type},
                       {"shape", t.shape},
                       {"nbytes", t.nbytes},
                       {"file", t.file}});
  }
  j["tensors"] = std::move(tensors);
  j["runtime_owned"] = r->runtime_owned;
  j["files"] = r->files;
  j["errors"] = DiagnosticsOf(r->report.errors());
  j["warnings"] = DiagnosticsOf(r->report.warnings());
  return ToPython(j);
}

// Reweight: {"ok": True, "written", "kept", "unused": [name], "zero_filled":
// [{key, offset, nbytes}], "zero_filled_bytes", "errors": [], "warnings":
// [...]}; the failure dict of FailedCall when a rule is broken.
nb::object ReweightCall(std::string checkpoint, std::optional<std::string> manifest,
                        std::optional<std::string> pte, std::string out,
                        std::optional<std::string> base,
                        std::vector<std::pair<std::string, std::string>> rename) {
  ptd::ReweightOptions options;
  options.base = base;
  options.rename = std::move(rename);
  absl::StatusOr<ptd::ReweightResult> r;
  {
    nb::gil_scoped_release release;
    r = ptd::Reweight(checkpoint, ptd::BundlePaths{.ptd = "", .manifest = manifest, .pte = pte},
                      out, options);
  }
  if (!r.ok()) {
    std::vector<std::string> files = Present({&manifest, &pte, &base});
    files.push_back(checkpoint);
    files.push_back(out);
    // Shards lie beside their index.
    std::vector<std::string> folders;
    if (checkpoint.size() >= 5 && checkpoint.compare(checkpoint.size() - 5, 5, ".json") == 0) {
      folders.emplace_back(DirName(checkpoint));
    }
    return FailedCall(r.status(), files, folders);
  }
  nlohmann::ordered_json j{{"ok", true}};
  j["written"] = r->written;
  j["kept"] = r->kept;
  j["unused"] = r->unused;
  nlohmann::ordered_json zero = nlohmann::ordered_json::array();
  for (const ptd::ZeroFill& z : r->zero_filled) {
    zero.push_back({{"key", z.key}, {"offset", z.offset}, {"nbytes", z.nbytes}});
  }
  j["zero_filled"] = std::move(zero);
  j["zero_filled_bytes"] = r->zero_filled_bytes;
  j["errors"] = DiagnosticsOf(r->report.errors());
  j["warnings"] = DiagnosticsOf(r->report.warnings());
  return ToPython(j);
}

}  // namespace

void DefineCheckpoint(nb::module_& m) {
  m.def("extract", &Extract, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("out"), nb::arg("max_shard_size").none(),
        "ExtractWeights: the result as a dict, or the failure dict of the broken rule.");
  m.def("reweight", &ReweightCall, nb::arg("checkpoint"), nb::arg("manifest").none(),
        nb::arg("pte").none(), nb::arg("out"), nb::arg("base").none(), nb::arg("rename"),
        "Reweight: the result as a dict, or the failure dict of the broken rule.");
}

}  // namespace ptd_python
