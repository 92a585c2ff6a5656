// The readable form of a verification report, built from its JSON object so
// that both forms always say the same thing.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ptd/scalar_type.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/utf8.h"
#include "ptd/verify.h"

namespace ptd {
namespace {

using json = nlohmann::ordered_json;

// A string of the report, printable: keys, fqns and messages come from the
// file and need not be UTF-8 (the JSON output replaces bad bytes the same way).
std::string Str(const json& v) {
  return internal::PrintableUtf8(v.get<std::string>());
}

std::string Num(const json& v) {
  if (v.is_null()) return "-";
  return v.dump();
}

std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  return absl::StrCat(n, " ", internal::Sv(n == 1 ? one : many));
}

// "107374182400 bytes (100 GiB)"; "48 bytes"; "unknown size" for null.
std::string ByteSize(const json& v) {
  if (v.is_null()) return "unknown size";
  const uint64_t n = v.get<uint64_t>();
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

std::string Dims(const json& v) {
  std::vector<std::string> parts;
  for (const auto& x : v) parts.push_back(x.dump());
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

void Diagnostics(const json& list, std::string_view one, std::string_view many,
                 std::string* out) {
  if (list.empty()) return;
  absl::StrAppend(out, Plural(list.size(), one, many), ":\n");
  for (const auto& d : list) {
    std::string where;
    if (d.contains("file")) where = Str(d["file"]);
    if (d.contains("source")) absl::StrAppend(&where, " [", Str(d["source"]), "]");
    const std::string rule = Str(d["rule"]);
    absl::StrAppend(out, "  ", rule, "  ", WithoutRule(Str(d["message"]), rule));
    if (!where.empty()) absl::StrAppend(out, "\n      in ", where);
    if (d.contains("hint")) absl::StrAppend(out, "\n      hint: ", Str(d["hint"]));
    absl::StrAppend(out, "\n");
  }
  // Per-rule summary lines (e.g. how many weights one rule marked) go here.
}

std::string Verdict(const json& j) {
  const size_t ne = j["errors"].size(), nw = j["warnings"].size();
  return absl::StrCat(Str(j["ptd"]["path"]), ": ", j["ok"].get<bool>() ? "OK" : "FAILED",
                      " (", Plural(ne, "error", "errors"), ", ",
                      Plural(nw, "warning", "warnings"), ")\n");
}

// How many rows to print of `n`, and the summary row for the rest.
size_t Shown(size_t n, const TextOptions& text) {
  return text.max_rows == 0 ? n : std::min(n, text.max_rows);
}

void MoreRow(size_t n, size_t shown, std::string_view what, std::string* out) {
  if (shown >= n) return;
  absl::StrAppend(out, "    ... and ", n - shown, " more ", internal::Sv(what),
                  "; --all lists them\n");
}

// Each key's segment size, by key (the first entry of a duplicated key, as
// the container's lookup does): one pass, so a table of every weight is
// linear in the weights, not quadratic.
absl::flat_hash_map<std::string, const json*> SegmentSizes(const json& named_data) {
  absl::flat_hash_map<std::string, const json*> sizes;
  if (!named_data.is_array()) return sizes;
  sizes.reserve(named_data.size());
  for (const auto& n : named_data) {
    if (n["key"].is_string()) sizes.try_emplace(n["key"].get_ref<const std::string&>(), &n["size"]);
  }
  return sizes;
}

// The size of the segment that holds `key` (null when the key is absent or
// its size unknown).
json SegmentSizeOf(const absl::flat_hash_map<std::string, const json*>& sizes, const json& key) {
  if (!key.is_string()) return nullptr;
  const auto it = sizes.find(key.get_ref<const std::string&>());
  return it == sizes.end() ? json(nullptr) : *it->second;
}

// How many keys or weights there are: the total a report cut short gives
// (VerifyOptions::list_limit), else the length of the list.
size_t Count(const json& object, const char* total, const char* list) {
  if (object.contains(total)) return object[total].get<size_t>();
  return object[list].size();
}

// Marks for a weight's notes column.
std::string WeightNotes(const json& weight) {
  std::string notes = weight.value("runtime_owned", false) ? "runtime-owned" : "";
  // --stats: "NaN 2, Inf 0, min -1.5, max 3" (N1 warns about the first two).
  if (const auto it = weight.find("stats"); it != weight.end() && it->is_object()) {
    const json& st = *it;
    absl::StrAppend(&notes, notes.empty() ? "" : "; ", "NaN ", Num(st["nan"]), ", Inf ",
                    Num(st["inf"]));
    if (!st["min"].is_null()) {
      absl::StrAppend(&notes, ", min ", absl::StrFormat("%.6g", st["min"].get<double>()),
                      ", max ", absl::StrFormat("%.6g", st["max"].get<double>()));
    }
  }
  return notes;
}

}  // namespace

std::string FormatText(const VerifyOutcome& outcome, const TextOptions& text) {
  const json& j = outcome.json;
  std::string out;
  if (outcome.io_error) {
    return absl::StrCat("cannot read input: ", *outcome.io_error, " (", kInputRule, ")\n");
  }
  bool truncated = false;
  absl::StrAppend(&out, Verdict(j));
  Diagnostics(j["errors"], "error", "errors", &out);
  Diagnostics(j["warnings"], "warning", "warnings", &out);
  size_t refused = 0;  // U1: what upstream's CUDA runtime would not load.
  for (const auto& d : j["warnings"]) refused += d["rule"] == "U1" ? 1 : 0;
  if (refused > 0) {
    absl::StrAppend(&out, "U1: upstream's CUDA runtime would refuse this file: ", refused,
                    refused == 1 ? " weight has a dtype" : " weights have dtypes",
                    " it does not load\n");
  }

  const json& p = j["ptd"];
  absl::StrAppend(&out, "\ncontainer ", Str(p["path"]), ": ", ByteSize(p["size"]));
  if (p["segments"].is_null()) {
    absl::StrAppend(&out, ", not parsed (see the errors above)\n");
  } else {
    absl::StrAppend(&out, ", version ", Num(p["version"]), ", segment base ",
                    Num(p["segment_base_offset"]), ", ", ByteSize(p["segment_data_size"]),
                    " of segment data, ", Plural(Count(p, "segment_count", "segments"), "segment", "segments"),
                    ", ", Plural(Count(p, "named_data_count", "named_data"), "key", "keys"));
    if (p.contains("segment_alignment_observed")) {
      absl::StrAppend(&out, ", segment alignment ", Num(p["segment_alignment_observed"]));
    }
    absl::StrAppend(&out, "\n");
  }
  if (p["named_data"].is_array() && !p["named_data"].empty()) {
    const std::vector<Column> columns = {{"key"},         {"segment", true},
                                         {"file offset", true}, {"bytes", true},
                                         {"layout"},      {"sha256"}};
    std::vector<std::vector<std::string>> rows;
    const size_t n = Count(p, "named_data_count", "named_data");
    const size_t shown = std::min(Shown(n, text), p["named_data"].size());
    for (size_t i = 0; i < shown; ++i) {
      const auto& nd = p["named_data"][i];
      std::string layout = "-";
      if (!nd["layout"].is_null()) {
        layout = absl::StrCat(internal::Sv(ScalarTypeName(nd["layout"]["scalar_type"].get<int>())),
                              Dims(nd["layout"]["sizes"]), " order",
                              Dims(nd["layout"]["dim_order"]));
      }
      const auto seg = nd["segment_index"].get<uint64_t>();
      // The segment's offset in the file: the base plus its offset in the data.
      std::string offset = "-";
      if (nd.contains("file_offset")) {
        offset = Num(nd["file_offset"]);
      } else if (seg < p["segments"].size() && p["segment_base_offset"].is_number_unsigned()) {
        offset = absl::StrCat(p["segment_base_offset"].get<uint64_t>() +
                              p["segments"][seg]["offset"].get<uint64_t>());
      }
      rows.push_back({Str(nd["key"]), Num(nd["segment_index"]), offset, Num(nd["size"]), layout,
                      nd.contains("sha256")
                          ? (nd["sha256"].is_null() ? "-" : Str(nd["sha256"]))
                          : ""});
    }
    Table(columns, rows, &out);
    MoreRow(n, shown, "keys", &out);
    truncated |= shown < n;
  }

  const auto segment_sizes = SegmentSizes(p["named_data"]);
  for (const auto& m : j["manifests"]) {
    std::string name = Str(m["source"]);
    if (m.contains("file")) {
      name = m["source"] == "manifest" ? Str(m["file"])
                                       : absl::StrCat(Str(m["source"]), " in ", Str(m["file"]));
    }
    absl::StrAppend(&out, "\nmanifest ", name,
                    m.contains("format") ? absl::StrCat(" (", Str(m["format"]), ")")
                                         : std::string(),
                    ": ", Plural(m["variants"].size(), "variant", "variants"), ", ",
                    Plural(Count(m, "weight_count", "weights"), "weight", "weights"), "\n");
    for (size_t i = 0; i < m["variants"].size(); ++i) {
      const auto& v = m["variants"][i];
      absl::StrAppend(&out, "    variant ", i, ": target_sm ", Num(v["target_sm"]),
                      ", ptx_compute ", Num(v["ptx_compute"]),
                      v["fallback_only"].get<bool>() ? ", fallback only" : "",
                      ", library '", Str(v["so_blob_key"]), "'\n");
    }
    if (m.contains("selection")) {
      const auto& s = m["selection"];
      if (s["variant"].is_null()) {
        absl::StrAppend(&out, "    on sm ", Num(s["sm"]), ": ",
                        Str(s["message"]), "\n");
      } else {
        absl::StrAppend(&out, "    on sm ", Num(s["sm"]), ": runs variant ",
                        Num(s["variant"]),
                        s["via_ptx"].get<bool>() ? " (through PTX)" : "", "\n");
      }
    }
    if (m["weights"].empty()) continue;
    // "required": the bytes the view reaches; "segment": the bytes the .ptd
    // holds for the storage; "manifest": the manifest's storage_nbytes.
    const std::vector<Column> columns = {
        {"fqn"},          {"dtype"},         {"sizes"},           {"strides"},
        {"offset (elements)", true},         {"storage"},         {"required", true},
        {"segment", true}, {"manifest", true}, {"sha256"},        {"notes"}};
    std::vector<std::vector<std::string>> rows;
    const size_t n = Count(m, "weight_count", "weights");
    const size_t shown = std::min(Shown(n, text), m["weights"].size());
    for (size_t i = 0; i < shown; ++i) {
      const auto& w = m["weights"][i];
      rows.push_back(
          {Str(w["fqn"]), std::string(ScalarTypeName(w["dtype"].get<int64_t>())),
           Dims(w["sizes"]), Dims(w["strides"]), Num(w["storage_offset"]),
           Str(w["storage_key"]), Num(w["required_nbytes"]),
           Num(w.contains("segment_size") ? w["segment_size"]
                                          : SegmentSizeOf(segment_sizes, w["storage_key"])),
           Num(w["storage_nbytes"]),
           w.contains("sha256") ? (w["sha256"].is_null() ? "-" : Str(w["sha256"])) : "",
           WeightNotes(w)});
    }
    Table(columns, rows, &out);
    MoreRow(n, shown, "weights", &out);
    truncated |= shown < n;
  }
  // A long report ends where a reader looks: the verdict again.
  if (truncated || j["errors"].size() + j["warnings"].size() > 20) {
    absl::StrAppend(&out, "\n", Verdict(j));
  }
  return out;
}

}  // namespace ptd
