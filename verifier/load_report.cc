// ptd-load's reports: the JSON object (the verifier's, with "device",
// "load", "timings", "runtime_owned" and, for a signed load, "signature";
// the load's parts rendered by runtime/loader/load_report_json.h, as Python
// converts them) and the readable text.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/load_report_json.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/verify_json.h"
#include "verifier/cli_util.h"
#include "verifier/load_cli.h"

namespace ptd_load {
namespace {

using json = nlohmann::ordered_json;
using ptd::internal::GBps;

std::string Ms(double s) { return absl::StrFormat("%.3f ms", s * 1e3); }

void ItemJson(const LoadedItem& item, json& j) {
  j["loaded"] = item.found;
  if (item.found) j["residency"] = std::string(ptd::ResidencyName(item.residency));
  if (item.has_sha) j["sha256"] = item.sha256 ? json(*item.sha256) : json(nullptr);
  if (item.has_materialized) {
    j["materialized_sha256"] =
        item.materialized_sha256 ? json(*item.materialized_sha256) : json(nullptr);
  }
}

// The median and the best of the loads' totals.
std::pair<double, double> MedianAndBest(std::vector<double> totals) {
  std::sort(totals.begin(), totals.end());
  return {totals[totals.size() / 2], totals.front()};
}

}  // namespace

int ReportJson(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const Loads& loads, const LoadResults& r) {
  const ptd::LoadedWeights& w = **loads.last;
  const ptd::LoadStats& st = w.stats();
  ptd::JsonExtras extras{.names = ptd::cli::ToolInputNames()};
  extras.key = [&](size_t i, json& j) { ItemJson(r.keys[i], j); };
  extras.weight = [&](size_t m, size_t i, json& j) { ItemJson(r.weights[m][i], j); };
  if (r.keys.empty()) extras.key = nullptr;
  json& j = ptd::cli::KeepUntilExit(ptd::VerifyJson(outcome, extras));
  j["device"] = DeviceJson(device);
  j["load"] = ptd::internal::LoadStatsJson(st, {.huge_page_bytes = loads.huge_page_bytes,
                                                .threads = a.threads,
                                                .device_budget = a.device_budget});
  if (st.signature.checked) j["signature"] = ptd::internal::SignatureReportJson(st.signature);
  j["runtime_owned"] = ptd::internal::RuntimeOwnedJson(w);
  j["timings"] = ptd::internal::LoadTimingsJson(w.timings(), st.bytes);  // The verification in.
  if (r.materialized > 0 || r.materialize_failed) {
    j["materialized"] = json{{"checked", r.materialized}, {"ok", !r.materialize_failed}};
  }
  if (a.repeat > 1) {
    const auto [median, best] = MedianAndBest(loads.totals);
    j["repeat"] = json{{"n", a.repeat},
                       {"median_total_s", median},
                       {"best_total_s", best},
                       {"median_gbps", GBps(st.bytes, median)},
                       {"best_gbps", GBps(st.bytes, best)}};
  }
  ptd::cli::WriteOut(ptd::DumpJson(j));
  return r.materialize_failed ? 2 : 0;
}

namespace {

// "  io: direct 1073741824 bytes (io_uring), buffered 0 bytes; cold, ...;
// fallback direct -> buffered: why" (LoadStats::io).
void IoLine(const ptd::IoReport& io, std::string* out) {
  using ptd::internal::Plural;
  absl::StrAppend(out, "  io (", ptd::internal::Sv(ptd::IoModeName(io.requested)), "): ");
  const char* sep = "";
  const auto engine = [&](const char* name, uint64_t bytes, const std::string& how) {
    if (bytes == 0) return;
    absl::StrAppend(out, sep, name, " ", Plural(bytes, "byte", "bytes"),
                    how.empty() ? std::string() : absl::StrCat(" (", how, ")"));
    sep = ", ";
  };
  engine("direct", io.direct_bytes, io.queue);
  engine("gds", io.gds_bytes, io.gds_mode);
  engine("buffered", io.buffered_bytes, "");
  if (*sep == '\0') absl::StrAppend(out, "nothing read");
  if (!io.choice.empty()) absl::StrAppend(out, "; ", io.choice);
  for (const ptd::IoFallback& f : io.fallbacks) {
    absl::StrAppend(out, "; fell back from ", ptd::internal::Sv(ptd::IoModeName(f.from)), " to ",
                    ptd::internal::Sv(ptd::IoModeName(f.to)), ": ", f.reason);
  }
  absl::StrAppend(out, "\n");
}

// "  N weights (...), N storages, ..." and, for a placed load, where they went.
void StatsLines(const Args& a, const ptd::LoadStats& st, std::string* out) {
  using ptd::internal::Plural;
  absl::StrAppend(out, "  ", Plural(st.weights, "weight", "weights"), " (", st.reused, " reused, ",
                  st.runtime_owned, " runtime-owned), ", Plural(st.storages, "storage", "storages"),
                  ", ", Plural(st.bytes, "byte", "bytes"), ", ",
                  Plural(st.allocations, "allocation call", "allocation calls"), ", ",
                  Plural(st.reads, "read", "reads"), " of ", Plural(st.bytes_read, "byte", "bytes"),
                  ", ", Plural(st.copies, "copy", "copies"),
                  st.copy_calls > 0
                      ? absl::StrCat(" in ", Plural(st.copy_calls, "copy call", "copy calls"))
                      : std::string(),
                  a.map_file ? absl::StrCat(", ", st.mapped, " mapped from the file (",
                                            Plural(st.mapped_bytes, "byte", "bytes"), ", ",
                                            Plural(st.mappings, "mapping", "mappings"), ")")
                             : std::string(),
                  "\n");
  IoLine(st.io, out);
  if (st.signature.checked) {
    absl::StrAppend(out, "  ", ptd::internal::SignatureReportLine(st.signature), "\n");
  }
  // Only with --device-budget or --host-fqn: the report of a plain load
  // keeps its lines.
  if (!a.placing()) return;
  absl::StrAppend(out, "  placed",
                  a.device_budget ? absl::StrCat(" (device budget ",
                                                 Plural(*a.device_budget, "byte", "bytes"), ")")
                                  : std::string(),
                  ": ");
  const char* sep = "";
  for (const ptd::Residency r : ptd::kAllResidencies) {
    absl::StrAppend(out, sep, std::string(ptd::ResidencyName(r)), " ",
                    Plural(st.placed(r).storages, "storage", "storages"), ", ",
                    Plural(st.placed(r).bytes, "byte", "bytes"));
    sep = "; ";
  }
  absl::StrAppend(out, "\n");
}

void TimingLines(const Args& a, const ptd::LoadTimings& t, const Loads& loads, uint64_t bytes,
                 std::string* out) {
  absl::StrAppend(
      out,
      absl::StrFormat(
          "  verify %s, plan %s, %sallocate %s, read %s (copy %s, wait %s), finish %s; total %s, "
          "first weight %s; %.2f GB/s (%.2f GB/s in the read phase)\n",
          Ms(t.verify_s), Ms(t.plan_s), a.map_file ? absl::StrCat("map ", Ms(t.map_s), ", ") : "",
          Ms(t.allocate_s), Ms(t.read_s), Ms(t.copy_s), Ms(t.wait_s), Ms(t.finish_s), Ms(t.total_s),
          Ms(t.first_weight_s), GBps(bytes, t.total_s), GBps(bytes, t.read_s)));
  if (a.repeat > 1) {
    const auto [median, best] = MedianAndBest(loads.totals);
    absl::StrAppend(
        out, absl::StrFormat("  %d loads: median %s (%.2f GB/s), best %s (%.2f GB/s)\n", a.repeat,
                             Ms(median), GBps(bytes, median), Ms(best), GBps(bytes, best)));
  }
}

}  // namespace

int ReportText(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const Loads& loads, const LoadResults& r) {
  const ptd::LoadedWeights& w = **loads.last;
  std::string out;
  const auto& warnings = outcome.report.warnings();
  absl::StrAppend(&out, a.ptd_path, ": verified (",
                  ptd::internal::Plural(warnings.size(), "warning", "warnings"), "), loaded onto ",
                  device.name(), "\n");
  for (const ptd::Diagnostic& d : warnings) {
    absl::StrAppend(&out, "  warning ", d.rule, ": ", d.message, "\n");
  }
  StatsLines(a, w.stats(), &out);
  TimingLines(a, w.timings(), loads, w.stats().bytes, &out);
  if (!w.runtime_owned().empty()) {
    absl::StrAppend(&out, "  runtime-owned, not loaded (the runtime allocates them):\n");
    for (const ptd::RuntimeOwnedWeight& o : w.runtime_owned()) {
      absl::StrAppend(&out, "    ", std::string(o.fqn), "  ",
                      std::string(ptd::ScalarTypeName(o.dtype)), " (", absl::StrJoin(o.sizes, ","),
                      ") strides (", absl::StrJoin(o.strides, ","), ") offset ", o.storage_offset,
                      " elements, ", o.required_nbytes, " bytes\n");
    }
  }
  for (const auto& [name, sha] : r.digests) absl::StrAppend(&out, "  ", sha, "  ", name, "\n");
  if (r.materialized > 0 || r.materialize_failed) {
    absl::StrAppend(&out, "  materialized on ", device.name(), ": ", r.materialized, " dense cop",
                    r.materialized == 1 ? "y" : "ies", " equal the gathered digests",
                    r.materialize_failed ? "; others FAILED (see stderr)" : "", "\n");
  }
  ptd::cli::WriteOut(out);
  return r.materialize_failed ? 2 : 0;
}

json DeviceJson(const ptd::Device& d) {
  return json{{"name", d.name()},
              {"kind", std::string(ptd::DeviceKindName(d.kind()))},
              {"index", d.index()},
              {"host_accessible", d.host_accessible()}};
}

}  // namespace ptd_load
