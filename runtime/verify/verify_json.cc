// The JSON form of a VerifyOutcome (docs/SPEC.md section 6). Members in the
// order the report has always had; golden files pin it byte for byte.
#include "runtime/verify/verify_json.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "ptd/manifest.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/input_text.h"

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

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json LayoutJson(const TensorLayout* l) {
  if (!l) return nullptr;
  json j = Object(3);
  j["scalar_type"] = l->scalar_type;
  j["sizes"] = l->sizes;
  j["dim_order"] = l->dim_order;
  return j;
}

json KeyJson(const VerifiedContainer& p, const VerifiedKey& k, bool digest) {
  // key, segment_index, size, layout, file_offset, sha256; ptd-load adds
  // loaded, residency and sha256.
  json n = Object(7);
  n["key"] = k.entry->key;
  n["segment_index"] = k.entry->segment_index;
  n["size"] = OrNull(k.size);
  n["layout"] = LayoutJson(k.entry->layout);
  // A cut-short report may not list the key's segment: its file offset
  // is given here instead.
  if (p.listed_segments < p.segment_count && k.file_offset) n["file_offset"] = *k.file_offset;
  if (digest) n["sha256"] = OrNull(k.sha256);
  return n;
}

json ContainerJson(const VerifiedContainer& p, const VerifyOptions& options,
                   const JsonExtras& extras) {
  // Room for every member (see Object): a member added past the capacity
  // would copy the key and segment lists.
  json j = Object(12);
  j["path"] = p.path;
  j["size"] = OrNull(p.size);
  const Container* c = p.container;
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
  json segs = json::array();
  segs.get_ref<json::array_t&>().reserve(p.listed_segments);
  for (size_t i = 0; i < p.listed_segments; ++i) {
    json one = Object(2);
    one["offset"] = c->segments()[i].offset;
    one["size"] = c->segments()[i].size;
    segs.push_back(std::move(one));
  }
  j["segments"] = std::move(segs);
  if (p.listed_segments < p.segment_count) j["segment_count"] = p.segment_count;
  json named = json::array();
  named.get_ref<json::array_t&>().reserve(p.keys.size());
  for (size_t i = 0; i < p.keys.size(); ++i) {
    named.push_back(KeyJson(p, p.keys[i], options.digest));
    if (extras.key) extras.key(i, named.back());
  }
  j["named_data"] = std::move(named);
  if (p.keys.size() < p.key_count) j["named_data_count"] = p.key_count;
  return j;
}

json WeightJson(const VerifiedWeight& v, bool keys_cut, const VerifyOptions& options) {
  const WeightEntry& e = *v.entry;
  // Eleven members here; ptd-load adds loaded, residency, sha256,
  // materialized_sha256.
  json j = Object(15);
  j["fqn"] = e.fqn;
  j["storage_key"] = e.storage_key;
  j["dtype"] = e.dtype;
  j["device_type"] = e.device_type;
  j["storage_offset"] = e.storage_offset;
  j["sizes"] = e.sizes;
  j["strides"] = e.strides;
  j["storage_nbytes"] = e.storage_nbytes;
  j["required_nbytes"] = OrNull(v.required_nbytes);
  // A cut-short report may not list the weight's key: the size of the
  // segment behind it is given here instead.
  if (keys_cut && v.key != nullptr) j["segment_size"] = OrNull(v.segment_size);
  // SPEC section 2: no stored bytes, so never a digest.
  j["runtime_owned"] = v.runtime_owned;
  if (options.digest) j["sha256"] = OrNull(v.sha256);
  if (options.stats && v.stats_dtype) {
    json st = nullptr;
    if (v.stats) {
      st = Object(4);
      st["nan"] = v.stats->nan;
      st["inf"] = v.stats->inf;
      st["min"] = OrNull(v.stats->min);
      st["max"] = OrNull(v.stats->max);
    }
    j["stats"] = std::move(st);
  }
  return j;
}

json VariantJson(const Variant& v) {
  return json{{"target_sm", v.target_sm},
              {"ptx_compute", v.ptx_compute},
              {"fallback_only", v.fallback_only()},
              {"so_blob_key", v.so_blob_key}};
}

json SelectionJson(const VerifiedSelection& s, const Manifest& m) {
  json sel{{"sm", s.sm}};
  if (s.choice) {
    sel["variant"] = s.choice->index;
    sel["via_ptx"] = s.choice->via_ptx;
    sel["so_blob_key"] = m.variants[s.choice->index].so_blob_key;
  } else {
    sel["variant"] = nullptr;
    sel["message"] = s.message;
  }
  return sel;
}

json ManifestJson(const VerifyOutcome& out, size_t index, const JsonExtras& extras) {
  const VerifiedManifest& vm = out.manifests[index];
  const SourcedManifest& s = *vm.manifest;
  // source, format, variants, selection, weights, weight_count, file.
  json one = Object(8);
  one["source"] = s.source;
  one["format"] = std::string(ManifestFormatName(s.manifest.format));
  json variants = json::array();
  for (const Variant& v : s.manifest.variants) variants.push_back(VariantJson(v));
  one["variants"] = std::move(variants);
  if (vm.selection) one["selection"] = SelectionJson(*vm.selection, s.manifest);
  const bool keys_cut = out.ptd.keys.size() < out.ptd.key_count;
  json wj = json::array();
  wj.get_ref<json::array_t&>().reserve(vm.weights.size());
  for (size_t i = 0; i < vm.weights.size(); ++i) {
    wj.push_back(WeightJson(vm.weights[i], keys_cut, out.options));
    if (extras.weight) extras.weight(index, i, wj.back());
  }
  one["weights"] = std::move(wj);
  if (vm.weights.size() < vm.weight_count) one["weight_count"] = vm.weight_count;
  // The file the manifest came from (the manifest file, or the .pte).
  if (!s.file.empty()) one["file"] = s.file;
  return one;
}

json ErrorsJson(const VerifyOutcome& out, const InputNames& names) {
  json errors = json::array();
  for (const Diagnostic& d : out.report.errors()) errors.push_back(DiagnosticJson(d));
  for (const InputError& e : out.io_errors) errors.push_back(DiagnosticJson(InputDiagnostic(e)));
  for (const InputHint& h : out.hints) errors[h.error]["hint"] = HintText(h, names);
  return errors;
}

json WarningsJson(const VerifyOutcome& out) {
  json warnings = json::array();
  for (const Diagnostic& d : out.report.warnings()) warnings.push_back(DiagnosticJson(d));
  return warnings;
}

}  // namespace

json DiagnosticJson(const Diagnostic& d) {
  json j{{"rule", d.rule}, {"message", d.message}, {"code", absl::StatusCodeToString(d.code)}};
  if (!d.file.empty()) j["file"] = d.file;
  if (d.key) j["key"] = *d.key;
  if (d.fqn) j["fqn"] = *d.fqn;
  if (d.segment) j["segment"] = *d.segment;
  if (d.source) j["source"] = *d.source;
  return j;
}

json VerifyJson(const VerifyOutcome& out, const JsonExtras& extras) {
  if (out.bundle == nullptr) {
    // The inputs could not be opened: nothing was verified.
    return json{
        {"ok", false},
        {"error", out.io_errors.empty() ? std::string()
                                        : std::string(out.io_errors.front().status.message())},
        {"ptd", ContainerJson(out.ptd, out.options, extras)},
        {"manifests", json::array()},
        {"errors", ErrorsJson(out, extras.names)},
        {"warnings", json::array()}};
  }
  // ok, ptd, manifests, errors, warnings, error; ptd-load adds device,
  // load, runtime_owned, timings, materialized and repeat. With room for
  // all, the weight lists are never copied when a member is added.
  json j = Object(16);
  j["ok"] = out.ok();
  j["ptd"] = ContainerJson(out.ptd, out.options, extras);
  json mj = json::array();
  for (size_t m = 0; m < out.manifests.size(); ++m) mj.push_back(ManifestJson(out, m, extras));
  j["manifests"] = std::move(mj);
  j["errors"] = ErrorsJson(out, extras.names);
  j["warnings"] = WarningsJson(out);
  if (const InputError* e = out.io_error()) j["error"] = std::string(e->status.message());
  if (out.signature.checked) j["signature"] = internal::SignatureReportJson(out.signature);
  return j;
}

std::string DumpJson(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string FormatJson(const VerifyOutcome& outcome, const InputNames& names) {
  return DumpJson(VerifyJson(outcome, JsonExtras{.names = names}));
}

}  // namespace ptd
