// ptd-load: verifies an ExecuTorch CUDA-backend .ptd (with its manifest or
// .pte), loads every weight onto a device, and says what it loaded, how long
// each phase took and how fast it went. With --digest, each weight's sha256
// is computed from the loaded memory (read back from the device), proving
// the right bytes reached the right place; on a CUDA device each weight is
// also materialized on the GPU (CudaDevice::MaterializeInto, into one
// scratch buffer reused from weight to weight) and the dense copy's sha256,
// read back, must equal the gathered one. --device-budget BYTES and
// --host-fqn PATTERN put part of the model in pinned host memory mapped for
// the GPU (LoadOptions::device_budget_bytes, host_fqns); the report and the
// JSON ("load": {"placement": ...}, each weight's "residency") say where
// each storage went.
//
// Exit codes: 0 loaded, 1 a rule is broken (nothing was allocated), 2 usage
// error, unreadable input, or a load that failed (device, I/O).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ptd/scalar_type.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/open_device.h"
#include "ptd/sha256.h"
#include "ptd/verify.h"
#include "verifier/cli_util.h"
#ifdef PTD_HAVE_CUDA
#include "ptd/cuda_device.h"
#include "ptd/view_materialize.h"
#endif

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double GBps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

std::string Ms(double s) { return absl::StrFormat("%.3f ms", s * 1e3); }

json TimingsJson(const ptd::LoadTimings& t, uint64_t bytes) {
  return json{{"verify_s", t.verify_s},   {"plan_s", t.plan_s},
              {"map_s", t.map_s},         {"allocate_s", t.allocate_s},
              {"read_s", t.read_s},
              {"copy_s", t.copy_s},       {"wait_s", t.wait_s},
              {"finish_s", t.finish_s},
              {"total_s", t.total_s},     {"first_weight_s", t.first_weight_s},
              {"gbps", GBps(bytes, t.total_s)}, {"read_gbps", GBps(bytes, t.read_s)}};
}

#ifdef PTD_HAVE_CUDA
// What MaterializedDigest reuses from weight to weight: one device buffer,
// grown only when a larger weight comes (a digest run makes O(1) device
// allocations, and no cudaFree per weight), and one host buffer.
struct MaterializeScratch {
  ptd::DeviceBuffer dense;
  std::vector<uint8_t> piece;
};

// sha256 of the dense, row-major copy of `w` made on the GPU and read back
// in pieces of at most 64 MiB.
absl::StatusOr<std::string> MaterializedDigest(ptd::CudaDevice& gpu,
                                               const ptd::LoadedWeights& weights,
                                               const ptd::LoadedWeight& w,
                                               MaterializeScratch& scratch) {
  const ptd::LoadedStorage& s = weights.storage(w);
  auto plan = ptd::PlanMaterialize(w.view(), s.buffer.size());
  if (!plan.ok()) return plan.status();
  const size_t nbytes = static_cast<size_t>(plan->output_nbytes);
  if (!scratch.dense || scratch.dense.size() < nbytes) {
    scratch.dense = ptd::DeviceBuffer();  // The old one goes first.
    auto grown = gpu.Allocate(nbytes);
    if (!grown.ok()) return grown.status();
    scratch.dense = *std::move(grown);
  }
  const absl::Status materialized = gpu.MaterializeInto(s.buffer, w.view(), scratch.dense);
  if (!materialized.ok()) return materialized;
  const size_t piece_bytes = std::min<size_t>(nbytes, size_t{64} << 20);
  if (scratch.piece.size() < piece_bytes) scratch.piece.resize(piece_bytes);
  ptd::Sha256 sha;
  for (size_t done = 0; done < nbytes;) {
    const size_t n = std::min(piece_bytes, nbytes - done);
    const absl::Status st = gpu.CopyToHost(
        scratch.piece.data(), static_cast<const uint8_t*>(scratch.dense.data()) + done, n);
    if (!st.ok()) return st;
    sha.Update(absl::MakeConstSpan(scratch.piece.data(), n));
    done += n;
  }
  return sha.HexDigest();
}
#endif

// A failure of ptd-load after verification, as one JSON error (SPEC
// section 6, rule I2).
json LoadErrorJson(const absl::Status& s, const std::string& file) {
  json e{{"rule", "I2"},
         {"message", absl::StrCat(s.message(), " (I2)")},
         {"code", absl::StatusCodeToString(s.code())}};
  if (!file.empty()) e["file"] = file;
  return e;
}

// The object --json prints when nothing was verified (the device could not
// be opened): the verifier's shape, with nothing known.
json UnverifiedJson(const std::string& ptd_path) {
  return json{{"ok", false},
              {"ptd", json{{"path", ptd_path}, {"size", nullptr}, {"version", nullptr},
                           {"segment_base_offset", nullptr}, {"segment_data_size", nullptr},
                           {"segments", nullptr}, {"named_data", nullptr}}},
              {"manifests", json::array()},
              {"errors", json::array()},
              {"warnings", json::array()},
              {"device", nullptr}};
}

std::string Dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

int Main(int argc, char** argv) {
#ifdef PTD_HAVE_CUDA
  ptd::RegisterCudaDevice();
#endif
  std::string ptd_path, device_spec = "auto";
  std::vector<std::string> fqns;
  uint32_t sm = 0;
  size_t threads = ptd::kDefaultLoadThreads;
  int repeat = 1;
  bool json_out = false, digest = false, map_file = false;

  CLI::App app(
      "Verifies an ExecuTorch .ptd weight file (with --manifest and/or --pte, its CUDA "
      "weight manifests), then loads every weight onto a device and reports what it "
      "loaded and how fast.\n"
      "Exit codes: 0 loaded, 1 a rule is broken (nothing allocated), 2 usage error, "
      "unreadable input or a failed load.",
      "ptd-load");
  ptd::cli::SetUp(app);
  app.set_version_flag("--version", std::function<std::string()>([] {
    return std::string("ptd-load ") + PTD_VERSION + "\n" + ptd::cli::MallocPagesLine() +
           "\n" + ptd::cli::MallocMmapLine();
  }));
  app.add_option("ptd", ptd_path, "the .ptd file")->required()->type_name("FILE.ptd");
  auto* manifest = app.add_option("--manifest", "a standalone ETCUDAFQN0 or ETCUDAFQN3 manifest")
                       ->type_name("FILE");
  auto* pte =
      app.add_option("--pte", "a .pte whose CUDA delegates carry manifests")->type_name("FILE");
  app.add_option("--device", device_spec,
                 "host, cuda or cuda:N (default: the best present)")
      ->type_name("DEVICE")
      ->capture_default_str();
  auto* sm_opt = app.add_option("--sm", sm,
                                "compute capability choosing each manifest's variant "
                                "(default: the device's; needs --manifest or --pte)")
                     ->type_name("N");
  app.add_option("--fqn", fqns,
                 "load only this weight (repeatable; needs --manifest or --pte)")
      ->type_name("NAME");
  app.add_option("--threads", threads, "reader threads")->check(CLI::Range(1, 256))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--repeat", repeat, "load N times; report the median and the best")
      ->check(CLI::Range(1, 100000))
      ->type_name("N")
      ->capture_default_str();
  app.add_flag("--map", map_file,
               "map host storages from the file (private, copy-on-write) instead of reading "
               "them into fresh memory: a cached file loads without a copy, but a process "
               "that writes the file in place changes the loaded weights, and one that "
               "truncates it makes their use fail with SIGBUS");
  std::string huge_pages = "auto";
  app.add_option("--huge-pages", huge_pages,
                 "how --device host backs fresh memory: transparent huge pages where they "
                 "cost no compaction and no hypervisor takes back free huge-page blocks "
                 "(auto), whenever THP is on (on), or 4 KiB pages (off)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->type_name("MODE")
      ->capture_default_str();
  std::string device_budget_text;
  auto* budget_opt =
      app.add_option("--device-budget", device_budget_text,
                     "device memory the load may take (bytes; K, M, G or T suffix, 1K = 1024): "
                     "storages go to device memory in manifest order until the next does not "
                     "fit, the rest to pinned host memory mapped for the GPU, which its kernels "
                     "read directly; a budget over the device's free memory fails before "
                     "anything is allocated (a CUDA device only)")
          ->type_name("BYTES")
          ->check(CLI::Validator(
              [](std::string& v) -> std::string {
                uint64_t n;
                return ptd::cli::ParseByteSize(v, &n)
                           ? std::string()
                           : "a byte count: a decimal integer with an optional K, M, G or T "
                             "suffix (1K = 1024), e.g. 48M";
              },
              ""));
  std::vector<std::string> host_fqns;
  app.add_option("--host-fqn", host_fqns,
                 "put the storages of the weights this fqn pattern matches (fnmatch: * and ?, "
                 "e.g. 'tok_embeddings.*') in mapped host memory before the budget is counted "
                 "(repeatable; without a manifest it matches storage keys; a CUDA device only)")
      ->type_name("PATTERN");
  app.add_flag("--json", json_out, "print one JSON object on stdout");
  bool all_rows = false;
  app.add_flag("--all", all_rows,
               "when verification fails, list every key and weight of the report (default: "
               "the first 50 of each)");
  app.add_flag("--digest", digest,
               "add sha256 of each weight, from the loaded memory; on a CUDA device also "
               "check each weight's dense copy made on the GPU against it");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ptd::cli::ExitOnParseError(app, e);
  }

  const bool has_manifest = !manifest->empty() || !pte->empty();
  if (!fqns.empty() && !has_manifest) {
    // Without a manifest there are only storage keys; a silent "load all"
    // would be wrong.
    std::cerr << "ptd-load: --fqn needs --manifest or --pte (weights are named by a manifest)\n";
    return 2;
  }
  if (!sm_opt->empty() && !has_manifest) {
    std::cerr << "ptd-load: note: --sm has no effect without --manifest or --pte\n";
  }

  std::optional<uint64_t> device_budget;
  if (!budget_opt->empty()) {
    uint64_t n = 0;
    (void)ptd::cli::ParseByteSize(device_budget_text, &n);  // Checked when parsed.
    device_budget = n;
  }
  const bool placing = device_budget.has_value() || !host_fqns.empty();

  auto device = ptd::OpenDevice(device_spec);
  if (device.ok() && placing && (*device)->kind() == ptd::DeviceKind::kHost) {
    // Reported as a device that cannot be opened is (JSON included).
    device = absl::InvalidArgumentError(absl::StrCat(
        device_budget ? "--device-budget" : "--host-fqn",
        " applies to a CUDA device; --device ", device_spec,
        " loads every weight into host memory already"));
  }
  if (device.ok() && huge_pages != "auto") {
    // Reported as a device that cannot be opened is (JSON included).
    if ((*device)->kind() != ptd::DeviceKind::kHost) {
      device = absl::InvalidArgumentError("--huge-pages applies to --device host");
    } else {
      *device = std::make_shared<ptd::HostDevice>(ptd::HostMemoryOptions{
          .huge_pages = huge_pages == "on" ? ptd::HugePages::kOn : ptd::HugePages::kOff});
    }
  }
  if (!device.ok()) {
    if (json_out) {
      json f = UnverifiedJson(ptd_path);
      f["errors"].push_back(LoadErrorJson(device.status(), ""));
      f["error"] = std::string(device.status().message());
      ptd::cli::WriteOut(Dump(f));
    }
    std::cerr << "ptd-load: " << device.status().message() << "\n";
    return 2;
  }

  // Verify: the verifier's own report (and JSON); nothing is loaded from a
  // file that breaks a rule.
  ptd::VerifyOptions vo{.ptd_path = ptd_path, .use_mmap = false};
  ptd::BundlePaths paths{.ptd = ptd_path, .use_mmap = false};
  if (!manifest->empty()) vo.manifest_path = paths.manifest = manifest->as<std::string>();
  if (!pte->empty()) vo.pte_path = paths.pte = pte->as<std::string>();
  if (!sm_opt->empty()) vo.sm = sm;
  // The readable report (of a file that fails) prints kReportRows of each
  // table; --json and the digests below go through every weight.
  if (!json_out && !digest && !all_rows) vo.list_limit = ptd::cli::kReportRows;
  const auto verify_t0 = std::chrono::steady_clock::now();
  ptd::VerifyOutcome& outcome = ptd::cli::KeepUntilExit(ptd::RunVerify(vo));
  // Verified once: every load below reads from this bundle.
  const double verify_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - verify_t0).count();
  json& j = outcome.json;  // Extended in place: a 100k-weight report is large.
  j["device"] = json{{"name", (*device)->name()},
                     {"kind", (*device)->kind() == ptd::DeviceKind::kHost ? "host" : "cuda"},
                     {"index", (*device)->index()},
                     {"host_accessible", (*device)->host_accessible()}};
  if (outcome.exit_code() != 0) {
    // An unreadable input is said once, on stderr (and in the JSON object).
    if (json_out) {
      ptd::cli::WriteOut(Dump(j));
      if (outcome.io_error) std::cerr << "ptd-load: " << *outcome.io_error << "\n";
    } else if (outcome.io_error) {
      std::cerr << "ptd-load: " << ptd::FormatText(outcome);
    } else {
      ptd::cli::WriteOut(
          ptd::FormatText(outcome, ptd::TextOptions{
                                 .max_rows = all_rows ? 0 : ptd::cli::kReportRows}));
    }
    return outcome.exit_code();
  }

  ptd::LoadOptions lo{.fqns = fqns,
                      .threads = threads,
                      .map_file = map_file,
                      .device_budget_bytes = device_budget,
                      .host_fqns = host_fqns};
  if (!sm_opt->empty()) lo.sm = sm;
  ptd::cli::ProgressBar bar;
  const bool show_progress = ::isatty(STDERR_FILENO) != 0;
  if (show_progress) {
    lo.progress = [&bar](uint64_t done, uint64_t total) { return bar.Update(done, total); };
  }
  // The last load is left to process exit, as the outcome is.
  std::optional<ptd::LoadedWeights>& loaded =
      ptd::cli::KeepUntilExit(std::optional<ptd::LoadedWeights>());
  std::vector<double> totals;
  uint64_t huge_page_bytes = 0;  // The last load's, on the device.
  for (int i = 0; i < repeat; ++i) {
    loaded.reset();  // One load's memory at a time.
    const uint64_t huge_before = (*device)->stats().huge_page_bytes;
    bar.Start(repeat > 1 ? absl::StrCat("loading ", i + 1, "/", repeat) : "loading");
    // The outcome keeps the bundle to exit: the result shares it (views into
    // its manifests instead of copies of 100,000 names).
    auto w = ptd::LoadWeights(outcome.bundle, *device, lo);
    bar.Erase();
    if (!w.ok()) {
      const std::string msg = std::string(w.status().message());
      if (json_out) {
        j["ok"] = false;
        j["error"] = msg;
        std::string file;
        for (const std::string& f : {ptd_path, paths.manifest.value_or(""), paths.pte.value_or("")}) {
          if (!f.empty() && absl::StartsWith(msg, f)) file = f;
        }
        j["errors"].push_back(LoadErrorJson(w.status(), file));
        ptd::cli::WriteOut(Dump(j));
      }
      std::cerr << "ptd-load: " << msg << "\n";
      return 2;
    }
    totals.push_back(verify_s + w->timings().total_s);
    huge_page_bytes = (*device)->stats().huge_page_bytes - huge_before;
    loaded.emplace(*std::move(w));
  }
  const ptd::LoadedWeights& w = *loaded;
  const ptd::LoadStats& st = w.stats();
  // The load's phases plus the one verification before them.
  ptd::LoadTimings timings = w.timings();
  timings.verify_s = verify_s;
  timings.total_s += verify_s;
  timings.first_weight_s += verify_s;
  std::vector<double> sorted = totals;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], best = sorted.front();

  // Digests from the loaded memory, into the verifier's JSON shape.
  std::vector<std::pair<std::string, std::string>> digests;  // name, sha256.
  const auto digest_of = [&](const absl::StatusOr<std::string>& d) -> json {
    if (d.ok()) return *d;
    std::cerr << "ptd-load: digest: " << d.status().message() << "\n";
    return nullptr;
  };
  // On a CUDA device: each weight's dense copy, made on the GPU, against the
  // digest gathered from the view read back. A failure or mismatch is exit 2.
  size_t materialized = 0;
  bool materialize_failed = false;
#ifdef PTD_HAVE_CUDA
  MaterializeScratch materialize_scratch;
#endif
  const auto check_materialized = [&](const ptd::LoadedWeight& lw, json& wj) {
#ifdef PTD_HAVE_CUDA
    auto* gpu = dynamic_cast<ptd::CudaDevice*>(w.device().get());
    if (gpu == nullptr || lw.device != ptd::DeviceKind::kCuda || wj["sha256"].is_null()) return;
    auto d = MaterializedDigest(*gpu, w, lw, materialize_scratch);
    if (!d.ok()) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': materialize on " << gpu->name() << ": "
                << d.status().message() << "\n";
      materialize_failed = true;
      wj["materialized_sha256"] = nullptr;
      return;
    }
    wj["materialized_sha256"] = *d;
    if (*d != wj["sha256"].get<std::string>()) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': the dense copy made on " << gpu->name()
                << " has sha256 " << *d << ", the view read back "
                << wj["sha256"].get<std::string>() << "\n";
      materialize_failed = true;
      return;
    }
    ++materialized;
#else
    (void)lw;
    (void)wj;
#endif
  };
  // Digests can be the slow part: the bar follows them by weights.
  uint64_t digest_total = 0, digest_done = 0;
  for (const auto& m : j["manifests"]) digest_total += m["weights"].size();
  if (j["manifests"].empty() && j["ptd"]["named_data"].is_array()) {
    digest_total = j["ptd"]["named_data"].size();
  }
  if (digest) bar.Start("digests", ptd::cli::ProgressBar::kItems);
  const auto digest_tick = [&] {
    if (digest && show_progress) bar.Update(++digest_done, digest_total);
  };
  // Per weight: "loaded" (and the digests) for the JSON object. The
  // readable report of a load prints neither; it looks nothing up.
  const bool per_weight = json_out || digest;
  if (per_weight) {
    for (auto& m : j["manifests"]) {
      const std::string source = m["source"];
      for (auto& wj : m["weights"]) {
        const ptd::LoadedWeight* lw = w.Find(source, wj["fqn"].get<std::string>());
        wj["loaded"] = lw != nullptr;
        if (lw != nullptr) wj["residency"] = std::string(ptd::ResidencyName(lw->residency));
        digest_tick();
        if (digest && lw == nullptr && wj.value("runtime_owned", false)) wj["sha256"] = nullptr;
        if (digest && lw != nullptr) {
          wj["sha256"] = digest_of(ptd::DigestLoadedWeight(w, *lw));
          if (!wj["sha256"].is_null()) digests.emplace_back(lw->fqn, wj["sha256"]);
          check_materialized(*lw, wj);
        }
      }
    }
  }
  if (per_weight && j["manifests"].empty()) {
    for (auto& nd : j["ptd"]["named_data"]) {
      const ptd::LoadedStorage* s = w.FindStorage(nd["key"].get<std::string>());
      nd["loaded"] = s != nullptr;
      if (s != nullptr) nd["residency"] = std::string(ptd::ResidencyName(s->residency));
      digest_tick();
      if (digest && s != nullptr) {
        nd["sha256"] = digest_of(ptd::DigestLoadedStorage(w, *s));
        if (!nd["sha256"].is_null()) digests.emplace_back(nd["key"], nd["sha256"]);
      }
    }
  }

  bar.Erase();

  if (json_out) {
    j["load"] = json{{"weights", st.weights},         {"reused", st.reused},
                     {"runtime_owned", st.runtime_owned}, {"storages", st.storages},
                     {"bytes", st.bytes},             {"allocations", st.allocations},
                     {"reads", st.reads},             {"bytes_read", st.bytes_read},
                     {"copies", st.copies},           {"mapped", st.mapped},
                     {"mapped_bytes", st.mapped_bytes}, {"mappings", st.mappings},
                     {"huge_page_bytes", huge_page_bytes}, {"threads", threads}};
    json placement = json::object();
    for (ptd::Residency r :
         {ptd::Residency::kDevice, ptd::Residency::kMappedHost, ptd::Residency::kHost}) {
      placement[std::string(ptd::ResidencyName(r))] =
          json{{"bytes", st.placed(r).bytes}, {"storages", st.placed(r).storages}};
    }
    j["load"]["placement"] = std::move(placement);
    j["load"]["device_budget"] = device_budget ? json(*device_budget) : json(nullptr);
    json owned = json::array();
    for (const ptd::RuntimeOwnedWeight& r : w.runtime_owned()) {
      owned.push_back(json{{"fqn", std::string(r.fqn)},
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
    j["runtime_owned"] = std::move(owned);
    j["timings"] = TimingsJson(timings, st.bytes);
    if (materialized > 0 || materialize_failed) {
      j["materialized"] = json{{"checked", materialized}, {"ok", !materialize_failed}};
    }
    if (repeat > 1) {
      j["repeat"] = json{{"n", repeat},
                         {"median_total_s", median},
                         {"best_total_s", best},
                         {"median_gbps", GBps(st.bytes, median)},
                         {"best_gbps", GBps(st.bytes, best)}};
    }
    ptd::cli::WriteOut(Dump(j));
    return materialize_failed ? 2 : 0;
  }

  const ptd::LoadTimings& t = timings;
  std::string out;
  const auto& warnings = outcome.report.warnings();
  absl::StrAppend(&out, ptd_path, ": verified (",
                  ptd::cli::Plural(warnings.size(), "warning", "warnings"),
                  "), loaded onto ", (*device)->name(), "\n");
  for (const ptd::Diagnostic& d : warnings) {
    absl::StrAppend(&out, "  warning ", d.rule, ": ", d.message, "\n");
  }
  absl::StrAppend(
      &out, "  ", ptd::cli::Plural(st.weights, "weight", "weights"), " (", st.reused,
      " reused, ", st.runtime_owned, " runtime-owned), ",
      ptd::cli::Plural(st.storages, "storage", "storages"), ", ",
      ptd::cli::Plural(st.bytes, "byte", "bytes"), ", ",
      ptd::cli::Plural(st.allocations, "allocation call", "allocation calls"), ", ",
      ptd::cli::Plural(st.reads, "read", "reads"), " of ",
      ptd::cli::Plural(st.bytes_read, "byte", "bytes"), ", ",
      ptd::cli::Plural(st.copies, "copy", "copies"),
      map_file ? absl::StrCat(", ", st.mapped, " mapped from the file (",
                              ptd::cli::Plural(st.mapped_bytes, "byte", "bytes"), ", ",
                              ptd::cli::Plural(st.mappings, "mapping", "mappings"), ")")
               : std::string(),
      "\n");
  if (placing) {
    // Only with --device-budget or --host-fqn: the report of a plain load
    // keeps its lines.
    absl::StrAppend(&out, "  placed",
                    device_budget
                        ? absl::StrCat(" (device budget ",
                                       ptd::cli::Plural(*device_budget, "byte", "bytes"), ")")
                        : std::string(),
                    ": ");
    const char* sep = "";
    for (ptd::Residency r :
         {ptd::Residency::kDevice, ptd::Residency::kMappedHost, ptd::Residency::kHost}) {
      absl::StrAppend(&out, sep, std::string(ptd::ResidencyName(r)), " ",
                      ptd::cli::Plural(st.placed(r).storages, "storage", "storages"), ", ",
                      ptd::cli::Plural(st.placed(r).bytes, "byte", "bytes"));
      sep = "; ";
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, absl::StrFormat(
      "  verify %s, plan %s, %sallocate %s, read %s (copy %s, wait %s), finish %s; total %s, "
      "first weight %s; %.2f GB/s (%.2f GB/s in the read phase)\n",
      Ms(t.verify_s), Ms(t.plan_s), map_file ? absl::StrCat("map ", Ms(t.map_s), ", ") : "",
      Ms(t.allocate_s), Ms(t.read_s), Ms(t.copy_s),
      Ms(t.wait_s), Ms(t.finish_s), Ms(t.total_s), Ms(t.first_weight_s), GBps(st.bytes, t.total_s),
      GBps(st.bytes, t.read_s)));
  if (repeat > 1) {
    absl::StrAppend(&out, absl::StrFormat("  %d loads: median %s (%.2f GB/s), best %s (%.2f GB/s)\n",
                                          repeat, Ms(median), GBps(st.bytes, median), Ms(best),
                                          GBps(st.bytes, best)));
  }
  if (!w.runtime_owned().empty()) {
    absl::StrAppend(&out, "  runtime-owned, not loaded (the runtime allocates them):\n");
    for (const ptd::RuntimeOwnedWeight& r : w.runtime_owned()) {
      absl::StrAppend(&out, "    ", std::string(r.fqn), "  ",
                      std::string(ptd::ScalarTypeName(r.dtype)), " (",
                      absl::StrJoin(r.sizes, ","), ") strides (", absl::StrJoin(r.strides, ","),
                      ") offset ", r.storage_offset, " elements, ", r.required_nbytes,
                      " bytes\n");
    }
  }
  for (const auto& [name, sha] : digests) absl::StrAppend(&out, "  ", sha, "  ", name, "\n");
  if (materialized > 0 || materialize_failed) {
    absl::StrAppend(&out, "  materialized on ", (*device)->name(), ": ", materialized,
                    " dense cop", materialized == 1 ? "y" : "ies",
                    " equal the gathered digests",
                    materialize_failed ? "; others FAILED (see stderr)" : "", "\n");
  }
  ptd::cli::WriteOut(out);
  return materialize_failed ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  ptd::cli::ReexecWithHugePageMalloc(argv);
  ptd::cli::FixMallocMmapThreshold();
  return ptd::cli::RunGuarded("ptd-load", [&] { return Main(argc, argv); });
}
