// ptd-load's parts, shared by its files: what the command line asks for
// (Args), what the loads measured (Loads), what each listed weight or key
// got (LoadResults, load_results.cc), and the reports (load_report.cc).
// verifier/load_main.cc parses, opens the device, verifies and loads.
#ifndef PTD_VERIFIER_LOAD_CLI_H_
#define PTD_VERIFIER_LOAD_CLI_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/model_signature.h"
#include "ptd/verify.h"

namespace ptd_load {

// What the command line asks for.
struct Args {
  std::string ptd_path, device_spec = "auto", huge_pages = "auto", io = "auto";
  std::optional<std::string> manifest, pte;
  std::vector<std::string> fqns, host_fqns;
  std::optional<uint32_t> sm;
  std::optional<uint64_t> device_budget;
  size_t threads = ptd::kDefaultLoadThreads;
  int repeat = 1;
  bool json_out = false, digest = false, map_file = false, all_rows = false, share_segments = false;
  ptd::SignatureOptions signature;

  bool has_manifest() const { return manifest || pte; }
  // --device-budget or --host-fqn: a placed load.
  bool placing() const { return device_budget.has_value() || !host_fqns.empty(); }
};

// What the loads measured: the last load's result, each load's total.
struct Loads {
  std::optional<ptd::LoadedWeights>* last = nullptr;
  std::vector<double> totals;
  uint64_t huge_page_bytes = 0;  // The last load's, on the device.
};

// What one listed weight or key got from the load, by its index in the
// outcome.
struct LoadedItem {
  bool found = false;
  ptd::Residency residency = ptd::Residency::kHost;
  bool has_sha = false;  // A "sha256" member (null when not taken).
  std::optional<std::string> sha256;
  bool has_materialized = false;
  std::optional<std::string> materialized_sha256;
};

struct LoadResults {
  std::vector<std::vector<LoadedItem>> weights;              // [manifest][weight].
  std::vector<LoadedItem> keys;                              // Without manifests.
  std::vector<std::pair<std::string, std::string>> digests;  // name, sha256.
  size_t materialized = 0;
  bool materialize_failed = false;
};

// Per weight (or key): "loaded" and the digests, for the JSON object and
// the digest lines. The readable report of a load prints neither without
// --digest; then nothing is looked up. Digest failures are said on stderr.
LoadResults CollectResults(const Args& a, const ptd::VerifyOutcome& outcome,
                           const ptd::LoadedWeights& w);

// The device as the JSON names it: {"name", "kind", "index",
// "host_accessible"}.
nlohmann::ordered_json DeviceJson(const ptd::Device& d);

// The report of a load, JSON or text, written to stdout; the exit code (2
// when a dense copy made on the GPU did not match).
int ReportJson(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const Loads& loads, const LoadResults& r);
int ReportText(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const Loads& loads, const LoadResults& r);

}  // namespace ptd_load

#endif  // PTD_VERIFIER_LOAD_CLI_H_
