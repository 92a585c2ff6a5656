// LoadStats::io (IoReport) as JSON: `ptd-load --json`'s load.io, and what
// Python's LoadedWeights.io() converts (one renderer for both). Header-only:
// the loader itself has no JSON dependency, its front ends do.
#ifndef PTD_RUNTIME_LOADER_IO_REPORT_JSON_H_
#define PTD_RUNTIME_LOADER_IO_REPORT_JSON_H_

#include <string>

#include "nlohmann/json.hpp"

#include "ptd/loader.h"

namespace ptd::internal {

// {"requested", "engines": {"buffered", "direct", "gds"} (bytes read),
//  "gds_mode": null | "p2p" | "compat", "fallbacks": [{"from", "to",
//  "reason"}], "cached_bytes": null | bytes, "file_bytes", "queue": null |
//  "io_uring" | "threads", "direct_readers", "choice"}.
inline nlohmann::ordered_json IoReportJson(const IoReport& io) {
  using J = nlohmann::ordered_json;
  J fallbacks = J::array();
  for (const IoFallback& f : io.fallbacks) {
    fallbacks.push_back(J{{"from", std::string(IoModeName(f.from))},
                          {"to", std::string(IoModeName(f.to))},
                          {"reason", f.reason}});
  }
  return J{{"requested", std::string(IoModeName(io.requested))},
           {"engines",
            J{{"buffered", io.buffered_bytes}, {"direct", io.direct_bytes}, {"gds", io.gds_bytes}}},
           {"gds_mode", io.gds_mode.empty() ? J(nullptr) : J(io.gds_mode)},
           {"fallbacks", std::move(fallbacks)},
           {"cached_bytes", io.cached_bytes ? J(*io.cached_bytes) : J(nullptr)},
           {"file_bytes", io.file_bytes},
           {"queue", io.queue.empty() ? J(nullptr) : J(io.queue)},
           {"direct_readers", io.direct_readers},
           {"choice", io.choice}};
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_IO_REPORT_JSON_H_
