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
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/open_device.h"
#include "ptd/report.h"
#include "ptd/scalar_type.h"
#include "ptd/sha256.h"
#include "ptd/verify.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/io_report_json.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/verify_json.h"
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

// The options of how to load (the flags past the inputs).
void AddLoadFlags(CLI::App& app, Args* a, std::string* budget_text) {
  app.add_option("--fqn", a->fqns, "load only this weight (repeatable; needs --manifest or --pte)")
      ->type_name("NAME");
  app.add_option("--threads", a->threads, "reader threads")
      ->check(CLI::Range(1, 256))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--repeat", a->repeat, "load N times; report the median and the best")
      ->check(CLI::Range(1, 100000))
      ->type_name("N")
      ->capture_default_str();
  app.add_flag("--map", a->map_file,
               "map host storages from the file (private, copy-on-write) instead of reading "
               "them into fresh memory: a cached file loads without a copy, but a process "
               "that writes the file in place changes the loaded weights, and one that "
               "truncates it makes their use fail with SIGBUS");
  app.add_option("--io", a->io,
                 "how the file is read: past the page cache with O_DIRECT, several requests "
                 "in flight (direct), through it (buffered), per range by what it already "
                 "holds (auto), or GPUDirect Storage into GPU memory (gds: cuFile, loaded at run "
                 "time from PTD_CUFILE_LIBRARY or libcufile.so.0); "
                 "an engine that cannot run falls back and says why (load.io)")
      ->check(CLI::IsMember({"auto", "buffered", "direct", "gds"}))
      ->type_name("ENGINE")
      ->capture_default_str();
  app.add_flag("--share-segments", a->share_segments,
               "keys whose bytes the file stores once share one storage (one allocation, one "
               "read), as tied weights may; only for weights no program writes: an AOTInductor "
               "program writes the buffers it mutates (KV caches) in place, and the exporter "
               "stores every layer's zero-filled cache once");
  app.add_option("--huge-pages", a->huge_pages,
                 "how --device host backs fresh memory: transparent huge pages where they "
                 "cost no compaction and no hypervisor takes back free huge-page blocks "
                 "(auto), whenever THP is on (on), or 4 KiB pages (off)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->type_name("MODE")
      ->capture_default_str();
  app.add_option("--device-budget", *budget_text,
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
  app.add_option("--host-fqn", a->host_fqns,
                 "put the storages of the weights this fqn pattern matches (fnmatch: * and ?, "
                 "e.g. 'tok_embeddings.*') in mapped host memory before the budget is counted "
                 "(repeatable; without a manifest it matches storage keys; a CUDA device only)")
      ->type_name("PATTERN");
}

// Parses the command line into `a`; nullopt to go on, else the exit code.
std::optional<int> Parse(int argc, char** argv, Args* a) {
  CLI::App app(
      "Verifies an ExecuTorch .ptd weight file (with --manifest and/or --pte, its CUDA "
      "weight manifests), then loads every weight onto a device and reports what it "
      "loaded and how fast.\n"
      "Exit codes: 0 loaded, 1 a rule is broken (nothing allocated), 2 usage error, "
      "unreadable input or a failed load.",
      "ptd-load");
  ptd::cli::SetUp(app, PTD_VERSION, /*malloc_lines=*/true);
  app.add_option("ptd", a->ptd_path, "the .ptd file")->required()->type_name("FILE.ptd");
  app.add_option("--manifest", a->manifest, ptd::cli::ManifestFlagHelp())->type_name("FILE");
  app.add_option("--pte", a->pte, "a .pte whose CUDA delegates carry manifests")->type_name("FILE");
  app.add_option("--device", a->device_spec,
                 "host (or its alias cpu), cuda or cuda:N (default: the best present)")
      ->type_name("DEVICE")
      ->capture_default_str();
  app.add_option("--sm", a->sm,
                 "compute capability choosing each manifest's variant "
                 "(default: the device's; needs --manifest or --pte)")
      ->type_name("N");
  std::string budget_text;
  AddLoadFlags(app, a, &budget_text);
  app.add_flag("--json", a->json_out, "print one JSON object on stdout");
  app.add_flag("--all", a->all_rows,
               "when verification fails, list every key and weight of the report (default: "
               "the first 50 of each)");
  app.add_flag("--digest", a->digest,
               "add sha256 of each weight, from the loaded memory; on a CUDA device also "
               "check each weight's dense copy made on the GPU against it");
  ptd::cli::AddSignatureFlags(app, &a->signature);
  if (const std::optional<int> rc = ptd::cli::ParseCommandLine(app, argc, argv)) return rc;
  if (const std::optional<std::string> bad = ptd::cli::CheckSignatureFlags(a->signature)) {
    std::cerr << "ptd-load: " << *bad << "\n";
    return 2;
  }
  if (!budget_text.empty()) {
    uint64_t n = 0;
    (void)ptd::cli::ParseByteSize(budget_text, &n);  // Checked when parsed.
    a->device_budget = n;
  }
  if (!a->fqns.empty() && !a->has_manifest()) {
    // Without a manifest there are only storage keys; a silent "load all"
    // would be wrong.
    std::cerr << "ptd-load: --fqn needs --manifest or --pte (weights are named by a manifest)\n";
    return 2;
  }
  if (a->sm && !a->has_manifest()) {
    std::cerr << "ptd-load: note: --sm has no effect without --manifest or --pte\n";
  }
  return std::nullopt;
}

// The device to load onto; a combination of flags that cannot apply is
// reported as a device that cannot be opened (JSON included).
absl::StatusOr<std::shared_ptr<ptd::Device>> OpenLoadDevice(const Args& a) {
  auto device = ptd::OpenDevice(a.device_spec);
  if (!device.ok()) return device;
  const bool host = (*device)->kind() == ptd::DeviceKind::kHost;
  if (a.placing() && host) {
    return absl::InvalidArgumentError(absl::StrCat(
        a.device_budget ? "--device-budget" : "--host-fqn", " applies to a CUDA device; --device ",
        a.device_spec, " loads every weight into host memory already"));
  }
  if (a.huge_pages == "auto") return device;
  if (!host) return absl::InvalidArgumentError("--huge-pages applies to --device host");
  return std::shared_ptr<ptd::Device>(std::make_shared<ptd::HostDevice>(ptd::HostMemoryOptions{
      .huge_pages = a.huge_pages == "on" ? ptd::HugePages::kOn : ptd::HugePages::kOff}));
}

// A failure of ptd-load after verification, as one JSON error (SPEC
// section 6, rule I2). A load reads one file, the .ptd: once a load has
// begun its failures concern it.
json LoadErrorJson(const absl::Status& s, const std::string& file) {
  ptd::Diagnostic d;
  d.rule = ptd::kLoadRule;
  d.code = s.code();
  d.message = absl::StrCat(s.message(), " (", ptd::kLoadRule, ")");
  d.file = file;
  return ptd::DiagnosticJson(d);
}

// A device that cannot be opened: nothing was verified.
int DeviceFailed(const Args& a, const absl::Status& s) {
  if (a.json_out) {
    // The verifier's shape, with nothing known.
    json f{{"ok", false},
           {"ptd", json{{"path", a.ptd_path},
                        {"size", nullptr},
                        {"version", nullptr},
                        {"segment_base_offset", nullptr},
                        {"segment_data_size", nullptr},
                        {"segments", nullptr},
                        {"named_data", nullptr}}},
           {"manifests", json::array()},
           {"errors", json::array({LoadErrorJson(s, "")})},
           {"warnings", json::array()},
           {"device", nullptr},
           {"error", std::string(s.message())}};
    ptd::cli::WriteOut(ptd::DumpJson(f));
  }
  std::cerr << "ptd-load: " << s.message() << "\n";
  return 2;
}

json DeviceJson(const ptd::Device& d) {
  return json{{"name", d.name()},
              {"kind", std::string(ptd::DeviceKindName(d.kind()))},
              {"index", d.index()},
              {"host_accessible", d.host_accessible()}};
}

// Verifies once: every load reads from the outcome's bundle. Nothing is
// loaded from a file that breaks a rule.
const ptd::VerifyOutcome& Verify(const Args& a, double* seconds) {
  ptd::VerifyOptions vo{.ptd_path = a.ptd_path,
                        .manifest_path = a.manifest,
                        .pte_path = a.pte,
                        .sm = a.sm,
                        .use_mmap = false};
  // The readable report (of a file that fails) prints kReportRows of each
  // table; --json and the digests go through every weight.
  if (!a.json_out && !a.digest && !a.all_rows) vo.list_limit = ptd::cli::kReportRows;
  const auto t0 = Clock::now();
  const ptd::VerifyOutcome& outcome = ptd::cli::KeepUntilExit(ptd::RunVerify(vo));
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return outcome;
}

// Prints the report of a verification that failed.
int VerifyFailed(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device) {
  if (!a.json_out) return ptd::cli::PrintVerifyOutcome("ptd-load", outcome, nullptr, a.all_rows);
  json& j = ptd::cli::KeepUntilExit(
      ptd::VerifyJson(outcome, ptd::JsonExtras{.names = ptd::cli::ToolInputNames()}));
  j["device"] = DeviceJson(device);
  return ptd::cli::PrintVerifyOutcome("ptd-load", outcome, &j, a.all_rows);
}

// What the loads measured: the last load's result, each load's total.
struct Loads {
  std::optional<ptd::LoadedWeights>* last = nullptr;
  std::vector<double> totals;
  uint64_t huge_page_bytes = 0;  // The last load's, on the device.
};

// Loads `repeat` times from the verified bundle, one load's memory at a
// time; the first failure is returned.
absl::Status LoadRepeatedly(const Args& a, const ptd::VerifyOutcome& outcome,
                            const std::shared_ptr<ptd::Device>& device, double verify_s,
                            Loads* loads) {
  ptd::LoadOptions lo{.fqns = a.fqns,
                      .sm = a.sm,
                      .threads = a.threads,
                      .map_file = a.map_file,
                      .device_budget_bytes = a.device_budget,
                      .host_fqns = a.host_fqns,
                      .verify_s = verify_s,
                      .share_segments = a.share_segments,
                      .io = *ptd::ParseIoMode(a.io),
                      .signature = a.signature};
  ptd::cli::ProgressBar bar;
  if (::isatty(STDERR_FILENO) != 0) {
    lo.progress = [&bar](uint64_t done, uint64_t total) { return bar.Update(done, total); };
  }
  // The last load is left to process exit, as the outcome is.
  loads->last = &ptd::cli::KeepUntilExit(std::optional<ptd::LoadedWeights>());
  for (int i = 0; i < a.repeat; ++i) {
    loads->last->reset();  // One load's memory at a time.
    const uint64_t huge_before = device->stats().huge_page_bytes;
    bar.Start(a.repeat > 1 ? absl::StrCat("loading ", i + 1, "/", a.repeat) : "loading");
    // The outcome keeps the bundle to exit: the result shares it (views into
    // its manifests instead of copies of 100,000 names).
    auto w = ptd::LoadWeights(outcome.bundle, device, lo);
    bar.Erase();
    if (!w.ok()) return w.status();
    loads->totals.push_back(w->timings().total_s);
    loads->huge_page_bytes = device->stats().huge_page_bytes - huge_before;
    loads->last->emplace(*std::move(w));
  }
  return absl::OkStatus();
}

// The rule of a signed load's failure (A1-A7), when it is one.
std::optional<std::string> SignatureRule(const absl::Status& s) {
  const absl::string_view m = s.message();
  const std::optional<std::string_view> rule =
      ptd::RuleOfMessage(std::string_view(m.data(), m.size()));
  if (!rule || rule->front() != 'A') return std::nullopt;
  return std::string(*rule);
}

// A load that failed after verification: I2, exit code 2; a signed load
// that broke an A-rule: that rule, exit code 1.
int LoadFailed(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const absl::Status& s) {
  const std::optional<std::string> rule = SignatureRule(s);
  if (a.json_out) {
    json j = ptd::VerifyJson(outcome, ptd::JsonExtras{.names = ptd::cli::ToolInputNames()});
    j["device"] = DeviceJson(device);
    j["ok"] = false;
    j["error"] = std::string(s.message());
    if (rule) {
      ptd::Diagnostic d;
      d.rule = *rule;
      d.code = s.code();
      d.message = std::string(s.message());
      d.file = a.signature.signature;
      j["errors"].push_back(ptd::DiagnosticJson(d));
      j["signature"] = ptd::internal::SignatureReportJson(
          ptd::SignatureReport::OfFailedLoad(a.signature, a.ptd_path, s));
    } else {
      j["errors"].push_back(LoadErrorJson(s, a.ptd_path));
    }
    ptd::cli::WriteOut(ptd::DumpJson(j));
  }
  std::cerr << "ptd-load: " << s.message() << "\n";
  return rule ? 1 : 2;
}

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

std::optional<std::string> DigestOrNull(const absl::StatusOr<std::string>& d) {
  if (d.ok()) return *d;
  std::cerr << "ptd-load: digest: " << d.status().message() << "\n";
  return std::nullopt;
}

// On a CUDA device: the weight's dense copy, made on the GPU, against the
// digest gathered from the view read back. A failure or mismatch is exit 2.
class MaterializeCheck {
 public:
  explicit MaterializeCheck(const ptd::LoadedWeights& w) : w_(w) {}
  void Check(const ptd::LoadedWeight& lw, LoadedItem* item, LoadResults* r) {
#ifdef PTD_HAVE_CUDA
    auto* gpu = dynamic_cast<ptd::CudaDevice*>(w_.device().get());
    if (gpu == nullptr || lw.device != ptd::DeviceKind::kCuda || !item->sha256) return;
    item->has_materialized = true;
    auto d = MaterializedDigest(*gpu, w_, lw, scratch_);
    if (!d.ok()) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': materialize on " << gpu->name() << ": "
                << d.status().message() << "\n";
      r->materialize_failed = true;
      return;
    }
    item->materialized_sha256 = *d;
    if (*d != *item->sha256) {
      std::cerr << "ptd-load: weight '" << lw.fqn << "': the dense copy made on " << gpu->name()
                << " has sha256 " << *d << ", the view read back " << *item->sha256 << "\n";
      r->materialize_failed = true;
      return;
    }
    ++r->materialized;
#else
    (void)lw;
    (void)item;
    (void)r;
#endif
  }

 private:
  const ptd::LoadedWeights& w_;
#ifdef PTD_HAVE_CUDA
  MaterializeScratch scratch_;
#endif
};

// Per listed weight: whether it was loaded, where, and with --digest its
// digests. Loaded weights come manifest by manifest in entry order, so they
// are matched to the outcome's weights walking both in step.
void WeightResults(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::LoadedWeights& w,
                   const std::function<void()>& tick, LoadResults* r) {
  MaterializeCheck materialize(w);
  const std::vector<ptd::LoadedWeight>& loaded = w.weights();
  size_t next = 0;
  r->weights.resize(outcome.manifests.size());
  for (size_t m = 0; m < outcome.manifests.size(); ++m) {
    const ptd::VerifiedManifest& vm = outcome.manifests[m];
    r->weights[m].resize(vm.weights.size());
    for (size_t i = 0; i < vm.weights.size(); ++i) {
      const ptd::VerifiedWeight& vw = vm.weights[i];
      LoadedItem& item = r->weights[m][i];
      const ptd::LoadedWeight* lw = nullptr;
      if (next < loaded.size() && loaded[next].source == vm.manifest->source &&
          loaded[next].fqn == vw.entry->fqn) {
        lw = &loaded[next++];
      }
      item.found = lw != nullptr;
      if (lw != nullptr) item.residency = lw->residency;
      tick();
      if (!a.digest || (lw == nullptr && !vw.runtime_owned)) continue;
      item.has_sha = true;
      if (lw == nullptr) continue;
      item.sha256 = DigestOrNull(ptd::DigestLoadedWeight(w, *lw));
      if (item.sha256) r->digests.emplace_back(lw->fqn, *item.sha256);
      materialize.Check(*lw, &item, r);
    }
  }
}

// Per listed key, without manifests: the storage it was loaded into.
void KeyResults(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::LoadedWeights& w,
                const std::function<void()>& tick, LoadResults* r) {
  r->keys.resize(outcome.ptd.keys.size());
  for (size_t i = 0; i < outcome.ptd.keys.size(); ++i) {
    const ptd::VerifiedKey& k = outcome.ptd.keys[i];
    LoadedItem& item = r->keys[i];
    const ptd::LoadedStorage* s = w.FindStorage(k.entry->key);
    item.found = s != nullptr;
    if (s != nullptr) item.residency = s->residency;
    tick();
    if (!a.digest || s == nullptr) continue;
    item.has_sha = true;
    item.sha256 = DigestOrNull(ptd::DigestLoadedStorage(w, *s));
    if (item.sha256) r->digests.emplace_back(k.entry->key, *item.sha256);
  }
}

// Per weight (or key): "loaded" and the digests, for the JSON object and
// the digest lines. The readable report of a load prints neither without
// --digest; then nothing is looked up.
LoadResults CollectResults(const Args& a, const ptd::VerifyOutcome& outcome,
                           const ptd::LoadedWeights& w) {
  LoadResults r;
  if (!a.json_out && !a.digest) return r;
  // Digests can be the slow part: the bar follows them by weights.
  ptd::cli::ProgressBar bar;
  const bool show = a.digest && ::isatty(STDERR_FILENO) != 0;
  uint64_t total = 0, done = 0;
  for (const ptd::VerifiedManifest& m : outcome.manifests) total += m.weights.size();
  if (outcome.manifests.empty()) total = outcome.ptd.keys.size();
  if (a.digest) bar.Start("digests", ptd::cli::ProgressBar::kItems);
  const std::function<void()> tick = [&] {
    if (show) bar.Update(++done, total);
  };
  WeightResults(a, outcome, w, tick, &r);
  if (outcome.manifests.empty()) KeyResults(a, outcome, w, tick, &r);
  bar.Erase();
  return r;
}

void ItemJson(const LoadedItem& item, json& j) {
  j["loaded"] = item.found;
  if (item.found) j["residency"] = std::string(ptd::ResidencyName(item.residency));
  if (item.has_sha) j["sha256"] = item.sha256 ? json(*item.sha256) : json(nullptr);
  if (item.has_materialized) {
    j["materialized_sha256"] =
        item.materialized_sha256 ? json(*item.materialized_sha256) : json(nullptr);
  }
}

json StatsJson(const Args& a, const ptd::LoadStats& st, uint64_t huge_page_bytes) {
  json load{{"weights", st.weights},
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
            {"huge_page_bytes", huge_page_bytes},
            {"threads", a.threads}};
  json placement = json::object();
  for (const ptd::Residency r : ptd::kAllResidencies) {
    placement[std::string(ptd::ResidencyName(r))] =
        json{{"bytes", st.placed(r).bytes}, {"storages", st.placed(r).storages}};
  }
  load["placement"] = std::move(placement);
  load["device_budget"] = a.device_budget ? json(*a.device_budget) : json(nullptr);
  load["io"] = ptd::internal::IoReportJson(st.io);
  return load;
}

json RuntimeOwnedJson(const ptd::LoadedWeights& w) {
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
  return owned;
}

// The median and the best of the loads' totals.
std::pair<double, double> MedianAndBest(std::vector<double> totals) {
  std::sort(totals.begin(), totals.end());
  return {totals[totals.size() / 2], totals.front()};
}

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
  j["load"] = StatsJson(a, st, loads.huge_page_bytes);
  if (st.signature.checked) j["signature"] = ptd::internal::SignatureReportJson(st.signature);
  j["runtime_owned"] = RuntimeOwnedJson(w);
  const ptd::LoadTimings& t = w.timings();  // The verification included.
  j["timings"] = json{{"verify_s", t.verify_s},
                      {"plan_s", t.plan_s},
                      {"map_s", t.map_s},
                      {"allocate_s", t.allocate_s},
                      {"read_s", t.read_s},
                      {"copy_s", t.copy_s},
                      {"wait_s", t.wait_s},
                      {"finish_s", t.finish_s},
                      {"total_s", t.total_s},
                      {"first_weight_s", t.first_weight_s},
                      {"gbps", GBps(st.bytes, t.total_s)},
                      {"read_gbps", GBps(st.bytes, t.read_s)}};
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

// parse -> open the device -> verify -> load -> report.
int Main(int argc, char** argv) {
#ifdef PTD_HAVE_CUDA
  ptd::RegisterCudaDevice();
#endif
  Args a;
  if (const std::optional<int> rc = Parse(argc, argv, &a)) return *rc;
  const auto device = OpenLoadDevice(a);
  if (!device.ok()) return DeviceFailed(a, device.status());
  double verify_s = 0;
  const ptd::VerifyOutcome& outcome = Verify(a, &verify_s);
  if (outcome.exit_code() != 0) return VerifyFailed(a, outcome, **device);
  Loads loads;
  const absl::Status loaded = LoadRepeatedly(a, outcome, *device, verify_s, &loads);
  if (!loaded.ok()) return LoadFailed(a, outcome, **device, loaded);
  const LoadResults r = CollectResults(a, outcome, **loads.last);
  return a.json_out ? ReportJson(a, outcome, **device, loads, r)
                    : ReportText(a, outcome, **device, loads, r);
}

}  // namespace

int main(int argc, char** argv) {
  ptd::cli::ReexecWithHugePageMalloc(argv);
  ptd::cli::FixMallocMmapThreshold();
  return ptd::cli::RunGuarded("ptd-load", [&] { return Main(argc, argv); });
}
