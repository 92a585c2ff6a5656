// A load's result as JSON: the one renderer of LoadStats, LoadTimings and the
// runtime-owned entries. `ptd-load --json` prints it ("load", "timings",
// "runtime_owned") and the Python module converts the same objects for
// Weights.stats, .timings, .placement and .runtime_owned. Header-only, as
// io_report_json.h: the loader itself has no JSON dependency, its front ends
// do.
#ifndef PTD_RUNTIME_LOADER_LOAD_REPORT_JSON_H_
#define PTD_RUNTIME_LOADER_LOAD_REPORT_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#include "ptd/loader.h"
#include "runtime/loader/io_report_json.h"

namespace ptd::internal {

// What a front end knows of a load that LoadStats does not hold.
struct LoadFacts {
  uint64_t huge_page_bytes = 0;           // Taken by the load on the device.
  size_t threads = 0;                     // LoadOptions::threads.
  std::optional<uint64_t> device_budget;  // LoadOptions::device_budget_bytes.
};

// GB/s (10^9 bytes per second); 0 for no time.
inline double GBps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

// {"device": {"bytes", "storages"}, "mapped_host": ..., "host": ...}.
inline nlohmann::ordered_json PlacementJson(const LoadStats& st) {
  nlohmann::ordered_json placement = nlohmann::ordered_json::object();
  for (const Residency r : kAllResidencies) {
    placement[std::string(ResidencyName(r))] =
        nlohmann::ordered_json{{"bytes", st.placed(r).bytes}, {"storages", st.placed(r).storages}};
  }
  return placement;
}

// `ptd-load --json`'s "load": the counts, "placement", "device_budget" and
// "io".
inline nlohmann::ordered_json LoadStatsJson(const LoadStats& st, const LoadFacts& facts) {
  using J = nlohmann::ordered_json;
  return J{{"weights", st.weights},
           {"reused", st.reused},
           {"runtime_owned", st.runtime_owned},
           {"storages", st.storages},
           {"bytes", st.bytes},
           {"allocations", st.allocations},
           {"reads", st.reads},
           {"bytes_read", st.bytes_read},
           {"copies", st.copies},
           {"copy_calls", st.copy_calls},
           {"bytes_via_scratch", st.bytes_via_scratch},
           {"mapped", st.mapped},
           {"mapped_bytes", st.mapped_bytes},
           {"mappings", st.mappings},
           {"huge_page_bytes", facts.huge_page_bytes},
           {"threads", facts.threads},
           {"placement", PlacementJson(st)},
           {"device_budget", facts.device_budget ? J(*facts.device_budget) : J(nullptr)},
           {"io", IoReportJson(st.io)}};
}

// `ptd-load --json`'s "timings": seconds per phase (the verification
// included) and the rates over `bytes`.
inline nlohmann::ordered_json LoadTimingsJson(const LoadTimings& t, uint64_t bytes) {
  return nlohmann::ordered_json{{"verify_s", t.verify_s},
                                {"plan_s", t.plan_s},
                                {"map_s", t.map_s},
                                {"allocate_s", t.allocate_s},
                                {"read_s", t.read_s},
                                {"copy_s", t.copy_s},
                                {"wait_s", t.wait_s},
                                {"finish_s", t.finish_s},
                                {"total_s", t.total_s},
                                {"first_weight_s", t.first_weight_s},
                                {"gbps", GBps(bytes, t.total_s)},
                                {"read_gbps", GBps(bytes, t.read_s)}};
}

// `ptd-load --json`'s "runtime_owned": what a runtime needs to allocate
// each entry the load left to it.
inline nlohmann::ordered_json RuntimeOwnedJson(const LoadedWeights& w) {
  nlohmann::ordered_json owned = nlohmann::ordered_json::array();
  for (const RuntimeOwnedWeight& r : w.runtime_owned()) {
    owned.push_back(nlohmann::ordered_json{
        {"fqn", std::string(r.fqn)},
        {"source", std::string(r.source)},
        {"storage_key", std::string(r.storage_key)},
        {"dtype", r.dtype},
        {"device_type", r.device_type},
        {"sizes", std::vector<int64_t>(r.sizes.begin(), r.sizes.end())},
        {"strides", std::vector<int64_t>(r.strides.begin(), r.strides.end())},
        {"storage_offset", r.storage_offset},
        {"storage_nbytes", r.storage_nbytes},
        {"required_nbytes", r.required_nbytes}});
  }
  return owned;
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_LOAD_REPORT_JSON_H_
