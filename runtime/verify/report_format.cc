// The readable form of a verification: FormatText, rendered from the typed
// VerifyOutcome (as the JSON form is, in verify_json.cc), so that both forms
// always say the same thing.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "ptd/manifest.h"
#include "ptd/scalar_type.h"
#include "ptd/verify.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/input_text.h"

namespace ptd {
namespace {

// A string of the report, printable: keys, fqns and messages come from the
// file and need not be UTF-8 (the JSON output replaces bad bytes the same way).
std::string Str(std::string_view v) { return internal::PrintableUtf8(v); }

// A number, or "-" for one that is not known.
template <typename T>
std::string Num(const std::optional<T>& v) {
  return v ? absl::StrCat(*v) : "-";
}

using internal::Plural;

// "107374182400 bytes (100 GiB)"; "48 bytes"; "unknown size" for nullopt.
std::string ByteSize(std::optional<uint64_t> v) {
  if (!v) return "unknown size";
  const uint64_t n = *v;
  std::string out = Plural(n, "byte", "bytes");
  if (n >= 1024) {
    static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = static_cast<double>(n);
    int u = -1;
    while (x >= 1024 && u < 5) {
      x /= 1024;
      ++u;
    }
    // Each format a literal: absl checks it at compile time (clang insists).
    absl::StrAppend(&out, x < 10 ? absl::StrFormat(" (%.1f %s)", x, kUnits[u])
                                 : absl::StrFormat(" (%.0f %s)", x, kUnits[u]));
  }
  return out;
}

template <typename Seq>
std::string Dims(const Seq& v) {
  std::vector<std::string> parts;
  for (const auto& x : v) parts.push_back(absl::StrCat(static_cast<int64_t>(x)));
  return absl::StrCat("(", absl::StrJoin(parts, ","), ")");
}

// A column of a table: its heading and whether its cells are numbers
// (right-aligned).
struct Column {
  std::string heading;
  bool numeric = false;
};

// Renders rows under headings; numbers right-aligned, text left-aligned. A
// column whose cells are all empty is left out.
void Table(const std::vector<Column>& columns, const std::vector<std::vector<std::string>>& rows,
           std::string* out) {
  const size_t nc = columns.size();
  std::vector<size_t> width(nc, 0);
  std::vector<bool> used(nc, false);
  for (size_t i = 0; i < nc; ++i) width[i] = internal::CodePointCount(columns[i].heading);
  for (const auto& r : rows) {
    for (size_t i = 0; i < nc && i < r.size(); ++i) {
      width[i] = std::max(width[i], internal::CodePointCount(r[i]));
      if (!r[i].empty()) used[i] = true;
    }
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string l = "   ";
    size_t last = 0;
    for (size_t i = 0; i < nc; ++i) {
      if (used[i]) last = i;
    }
    for (size_t i = 0; i < nc; ++i) {
      if (!used[i]) continue;
      const std::string& c = i < cells.size() ? cells[i] : std::string();
      const size_t pad = width[i] - internal::CodePointCount(c);
      absl::StrAppend(&l, " ");
      if (columns[i].numeric) l.append(pad, ' ');
      absl::StrAppend(&l, c);
      if (!columns[i].numeric && i != last) l.append(pad, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    absl::StrAppend(out, l, "\n");
  };
  std::vector<std::string> headings;
  for (const Column& c : columns) headings.push_back(c.heading);
  line(headings);
  for (const auto& r : rows) line(r);
}

// The message without its trailing " (RULE)": the rule is its own column.
std::string WithoutRule(const std::string& message, const std::string& rule) {
  const std::string suffix = absl::StrCat(" (", rule, ")");
  if (absl::EndsWith(message, suffix)) return message.substr(0, message.size() - suffix.size());
  return message;
}

// One list of diagnostics; `hints[i]` is the hint of the i-th (or empty).
void Diagnostics(const std::vector<Diagnostic>& list, const std::vector<std::string>& hints,
                 std::string_view one, std::string_view many, std::string* out) {
  if (list.empty()) return;
  absl::StrAppend(out, Plural(list.size(), one, many), ":\n");
  for (size_t i = 0; i < list.size(); ++i) {
    const Diagnostic& d = list[i];
    std::string where = Str(d.file);
    if (d.source) absl::StrAppend(&where, " [", Str(*d.source), "]");
    const std::string rule = Str(d.rule);
    absl::StrAppend(out, "  ", rule, "  ", WithoutRule(Str(d.message), rule));
    if (!where.empty()) absl::StrAppend(out, "\n      in ", where);
    if (i < hints.size() && !hints[i].empty()) {
      absl::StrAppend(out, "\n      hint: ", Str(hints[i]));
    }
    absl::StrAppend(out, "\n");
  }
}

std::string Verdict(const VerifyOutcome& o, size_t errors) {
  return absl::StrCat(Str(o.ptd.path), ": ", o.ok() ? "OK" : "FAILED", " (",
                      Plural(errors, "error", "errors"), ", ",
                      Plural(o.report.warnings().size(), "warning", "warnings"), ")\n");
}

// How many rows to print of `n`, and the summary row for the rest.
size_t Shown(size_t n, const TextOptions& text) {
  return text.max_rows == 0 ? n : std::min(n, text.max_rows);
}

void MoreRow(size_t n, size_t shown, std::string_view what, const TextOptions& text,
             std::string* out) {
  if (shown >= n) return;
  absl::StrAppend(out, "    ... and ", n - shown, " more ", internal::Sv(what), "; ",
                  text.names.all_rows, "\n");
}

// Each listed key's segment size, by key (the first entry of a duplicated
// key, as the container's lookup does): one pass, so a table of every
// weight is linear in the weights, not quadratic.
absl::flat_hash_map<std::string_view, std::optional<uint64_t>> SegmentSizes(
    const std::vector<VerifiedKey>& keys) {
  absl::flat_hash_map<std::string_view, std::optional<uint64_t>> sizes;
  sizes.reserve(keys.size());
  for (const VerifiedKey& k : keys) sizes.try_emplace(k.entry->key, k.size);
  return sizes;
}

// Marks for a weight's notes column.
std::string WeightNotes(const VerifiedWeight& w, bool stats) {
  std::string notes = w.runtime_owned ? "runtime-owned" : "";
  // --stats: "NaN 2, Inf 0, min -1.5, max 3" (N1 warns about the first two).
  if (stats && w.stats) {
    const WeightStats& st = *w.stats;
    absl::StrAppend(&notes, notes.empty() ? "" : "; ", "NaN ", st.nan, ", Inf ", st.inf);
    if (st.min) {
      absl::StrAppend(&notes, ", min ", absl::StrFormat("%.6g", *st.min), ", max ",
                      absl::StrFormat("%.6g", st.max.value_or(0)));
    }
  }
  return notes;
}

std::string DigestCell(bool digest, const std::optional<std::string>& sha) {
  if (!digest) return "";
  return sha ? Str(*sha) : "-";
}

void Diagnoses(const VerifyOutcome& o, const std::vector<Diagnostic>& errors,
               const TextOptions& text, std::string* out) {
  std::vector<std::string> hints(errors.size());
  for (const InputHint& h : o.hints) hints[h.error] = HintText(h, text.names);
  Diagnostics(errors, hints, "error", "errors", out);
  Diagnostics(o.report.warnings(), {}, "warning", "warnings", out);
  size_t refused = 0;  // U1: what upstream's CUDA runtime would not load.
  for (const Diagnostic& d : o.report.warnings()) refused += d.rule == "U1" ? 1 : 0;
  if (refused > 0) {
    absl::StrAppend(out, "U1: upstream's CUDA runtime would refuse this file: ", refused,
                    refused == 1 ? " weight has a dtype" : " weights have dtypes",
                    " it does not load\n");
  }
}

void ContainerLine(const VerifiedContainer& p, std::string* out) {
  absl::StrAppend(out, "\ncontainer ", Str(p.path), ": ", ByteSize(p.size));
  const Container* c = p.container;
  if (c == nullptr) {
    absl::StrAppend(out, ", not parsed (see the errors above)\n");
    return;
  }
  absl::StrAppend(out, ", version ", c->version(), ", segment base ",
                  c->header().segment_base_offset, ", ", ByteSize(c->header().segment_data_size),
                  " of segment data, ", Plural(p.segment_count, "segment", "segments"), ", ",
                  Plural(p.key_count, "key", "keys"), ", segment alignment ",
                  c->ObservedSegmentAlignment(), "\n");
}

// The key table; true when it was cut short.
bool KeyTable(const VerifyOutcome& o, const TextOptions& text, std::string* out) {
  const VerifiedContainer& p = o.ptd;
  if (p.keys.empty()) return false;
  const std::vector<Column> columns = {{"key"},         {"segment", true}, {"file offset", true},
                                       {"bytes", true}, {"layout"},        {"sha256"}};
  std::vector<std::vector<std::string>> rows;
  const size_t shown = std::min(Shown(p.key_count, text), p.keys.size());
  for (size_t i = 0; i < shown; ++i) {
    const VerifiedKey& k = p.keys[i];
    std::string layout = "-";
    if (const TensorLayout* l = k.entry->layout) {
      layout = absl::StrCat(internal::Sv(ScalarTypeName(l->scalar_type)), Dims(l->sizes), " order",
                            Dims(l->dim_order));
    }
    rows.push_back({Str(k.entry->key), absl::StrCat(k.entry->segment_index), Num(k.file_offset),
                    Num(k.size), layout, DigestCell(o.options.digest, k.sha256)});
  }
  Table(columns, rows, out);
  MoreRow(p.key_count, shown, "keys", text, out);
  return shown < p.key_count;
}

void ManifestHeading(const VerifiedManifest& vm, std::string* out) {
  const SourcedManifest& s = *vm.manifest;
  std::string name = Str(s.source);
  if (!s.file.empty()) {
    name = s.source == kStandaloneManifestSource ? Str(s.file)
                                                 : absl::StrCat(Str(s.source), " in ", Str(s.file));
  }
  absl::StrAppend(out, "\nmanifest ", name, " (", Str(ManifestFormatName(s.manifest.format)),
                  "): ", Plural(s.manifest.variants.size(), "variant", "variants"), ", ",
                  Plural(vm.weight_count, "weight", "weights"), "\n");
  for (size_t i = 0; i < s.manifest.variants.size(); ++i) {
    const Variant& v = s.manifest.variants[i];
    absl::StrAppend(out, "    variant ", i, ": target_sm ", v.target_sm, ", ptx_compute ",
                    v.ptx_compute, v.fallback_only() ? ", fallback only" : "", ", library '",
                    Str(v.so_blob_key), "'\n");
  }
  if (vm.selection) {
    const VerifiedSelection& sel = *vm.selection;
    if (!sel.choice) {
      absl::StrAppend(out, "    on sm ", sel.sm, ": ", Str(sel.message), "\n");
    } else {
      absl::StrAppend(out, "    on sm ", sel.sm, ": runs variant ", sel.choice->index,
                      sel.choice->via_ptx ? " (through PTX)" : "", "\n");
    }
  }
}

// One manifest's heading and weight table; true when the table was cut
// short.
bool ManifestTable(const VerifyOutcome& o, const VerifiedManifest& vm,
                   const absl::flat_hash_map<std::string_view, std::optional<uint64_t>>& sizes,
                   const TextOptions& text, std::string* out) {
  ManifestHeading(vm, out);
  if (vm.weights.empty()) return false;
  // "required": the bytes the view reaches; "segment": the bytes the .ptd
  // holds for the storage; "manifest": the manifest's storage_nbytes.
  const std::vector<Column> columns = {{"fqn"},
                                       {"dtype"},
                                       {"sizes"},
                                       {"strides"},
                                       {"offset (elements)", true},
                                       {"storage"},
                                       {"required", true},
                                       {"segment", true},
                                       {"manifest", true},
                                       {"sha256"},
                                       {"notes"}};
  const bool keys_cut = o.ptd.keys.size() < o.ptd.key_count;
  std::vector<std::vector<std::string>> rows;
  const size_t shown = std::min(Shown(vm.weight_count, text), vm.weights.size());
  for (size_t i = 0; i < shown; ++i) {
    const VerifiedWeight& w = vm.weights[i];
    const WeightEntry& e = *w.entry;
    std::optional<uint64_t> segment;
    if (keys_cut && w.key != nullptr) {
      segment = w.segment_size;
    } else if (const auto it = sizes.find(e.storage_key); it != sizes.end()) {
      segment = it->second;
    }
    rows.push_back({Str(e.fqn), std::string(ScalarTypeName(e.dtype)), Dims(e.sizes),
                    Dims(e.strides), absl::StrCat(e.storage_offset), Str(e.storage_key),
                    Num(w.required_nbytes), Num(segment), absl::StrCat(e.storage_nbytes),
                    DigestCell(o.options.digest, w.sha256),
                    WeightNotes(w, o.options.stats && w.stats_dtype)});
  }
  Table(columns, rows, out);
  MoreRow(vm.weight_count, shown, "weights", text, out);
  return shown < vm.weight_count;
}

}  // namespace

std::string FormatText(const VerifyOutcome& o, const TextOptions& text) {
  if (const InputError* e = o.io_error()) {
    return absl::StrCat("cannot read input: ", e->status.message(), " (", kInputRule, ")\n");
  }
  const std::vector<Diagnostic> errors = o.Errors();
  std::string out = Verdict(o, errors.size());
  Diagnoses(o, errors, text, &out);
  ContainerLine(o.ptd, &out);
  if (o.signature.checked) absl::StrAppend(&out, internal::SignatureReportLine(o.signature), "\n");
  bool truncated = KeyTable(o, text, &out);
  const auto sizes = SegmentSizes(o.ptd.keys);
  for (const VerifiedManifest& vm : o.manifests) {
    truncated |= ManifestTable(o, vm, sizes, text, &out);
  }
  // A long report ends where a reader looks: the verdict again.
  if (truncated || errors.size() + o.report.warnings().size() > 20) {
    absl::StrAppend(&out, "\n", Verdict(o, errors.size()));
  }
  return out;
}

}  // namespace ptd
