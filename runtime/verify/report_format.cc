// The readable form of a verification report, built from its JSON object so
// that both forms always say the same thing.
#include <algorithm>
#include <string>
#include <vector>

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

std::string Dims(const json& v) {
  std::vector<std::string> parts;
  for (const auto& x : v) parts.push_back(x.dump());
  return absl::StrCat("(", absl::StrJoin(parts, ","), ")");
}

// Renders rows as left-aligned columns.
void Table(const std::vector<std::vector<std::string>>& rows, std::string* out) {
  if (rows.empty()) return;
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      width[i] = std::max(width[i], internal::CodePointCount(r[i]));
    }
  }
  for (const auto& r : rows) {
    std::string line = "   ";
    for (size_t i = 0; i < r.size(); ++i) {
      absl::StrAppend(&line, " ", r[i]);
      if (i + 1 < r.size()) line.append(width[i] - internal::CodePointCount(r[i]), ' ');
    }
    absl::StrAppend(out, line, "\n");
  }
}

void Diagnostics(const json& list, std::string_view title, std::string* out) {
  if (list.empty()) return;
  absl::StrAppend(out, internal::Sv(title), " (", list.size(), "):\n");
  for (const auto& d : list) {
    std::string where;
    if (d.contains("file")) where = Str(d["file"]);
    if (d.contains("source")) absl::StrAppend(&where, " [", Str(d["source"]), "]");
    absl::StrAppend(out, "  ", Str(d["rule"]), "  ",
                    Str(d["message"]));
    if (!where.empty()) absl::StrAppend(out, "\n      in ", where);
    absl::StrAppend(out, "\n");
  }
}

}  // namespace

std::string FormatText(const VerifyOutcome& outcome) {
  const json& j = outcome.json;
  std::string out;
  if (outcome.io_error) {
    return absl::StrCat("ptd-verify: cannot read input: ", *outcome.io_error, "\n");
  }
  const size_t ne = j["errors"].size(), nw = j["warnings"].size();
  absl::StrAppend(&out, Str(j["ptd"]["path"]), ": ",
                  j["ok"].get<bool>() ? "OK" : "FAILED", " (", ne,
                  ne == 1 ? " error, " : " errors, ", nw,
                  nw == 1 ? " warning)\n" : " warnings)\n");
  Diagnostics(j["errors"], "errors", &out);
  Diagnostics(j["warnings"], "warnings", &out);
  size_t refused = 0;  // U1: what upstream's CUDA runtime would not load.
  for (const auto& d : j["warnings"]) refused += d["rule"] == "U1" ? 1 : 0;
  if (refused > 0) {
    absl::StrAppend(&out, "U1: upstream's CUDA runtime would refuse this file: ", refused,
                    refused == 1 ? " weight has a dtype" : " weights have dtypes",
                    " it does not load\n");
  }

  const json& p = j["ptd"];
  absl::StrAppend(&out, "\ncontainer: ", Num(p["size"]), " bytes, version ",
                  Num(p["version"]), ", segment base ", Num(p["segment_base_offset"]),
                  ", ", Num(p["segment_data_size"]), " data bytes, ",
                  p["segments"].size(), " segments, ", p["named_data"].size(),
                  " keys");
  if (p.contains("segment_alignment_observed")) {
    absl::StrAppend(&out, ", segment alignment ", Num(p["segment_alignment_observed"]));
  }
  absl::StrAppend(&out, "\n");
  if (!p["named_data"].empty()) {
    std::vector<std::vector<std::string>> rows = {
        {"key", "segment", "offset", "size", "layout", "sha256"}};
    for (const auto& n : p["named_data"]) {
      std::string layout = "-";
      if (!n["layout"].is_null()) {
        layout = absl::StrCat(internal::Sv(ScalarTypeName(n["layout"]["scalar_type"].get<int>())),
                              Dims(n["layout"]["sizes"]), " order",
                              Dims(n["layout"]["dim_order"]));
      }
      const auto seg = n["segment_index"].get<uint64_t>();
      const std::string offset = seg < p["segments"].size()
                                     ? Num(p["segments"][seg]["offset"])
                                     : "-";
      rows.push_back({Str(n["key"]), Num(n["segment_index"]), offset,
                      Num(n["size"]), layout,
                      n.contains("sha256") ? (n["sha256"].is_null()
                                                  ? "-"
                                                  : Str(n["sha256"]))
                                           : ""});
    }
    Table(rows, &out);
  }

  for (const auto& m : j["manifests"]) {
    absl::StrAppend(&out, "\nmanifest ", Str(m["source"]),
                    m.contains("format")
                        ? absl::StrCat(" (", Str(m["format"]), ")")
                        : std::string(),
                    ": ",
                    m["variants"].size(), " variant(s), ", m["weights"].size(),
                    " weight(s)\n");
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
    std::vector<std::vector<std::string>> rows = {
        {"fqn", "dtype", "sizes", "strides", "offset", "storage", "required/stored",
         "sha256"}};
    for (const auto& w : m["weights"]) {
      const bool owned = w.value("runtime_owned", false);
      rows.push_back(
          {owned ? absl::StrCat(Str(w["fqn"]), " (runtime-owned)") : Str(w["fqn"]),
           std::string(ScalarTypeName(w["dtype"].get<int64_t>())), Dims(w["sizes"]),
           Dims(w["strides"]), Num(w["storage_offset"]),
           Str(w["storage_key"]),
           absl::StrCat(Num(w["required_nbytes"]), "/", Num(w["storage_nbytes"])),
           w.contains("sha256")
               ? (w["sha256"].is_null() ? "-" : Str(w["sha256"]))
               : ""});
    }
    Table(rows, &out);
  }
  return out;
}

}  // namespace ptd
