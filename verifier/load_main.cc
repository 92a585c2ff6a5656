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
#include "ptd/rules.h"
#include "ptd/scalar_type.h"
#include "ptd/sha256.h"
#include "ptd/verify.h"
#include "runtime/internal/strings.h"
#include "runtime/loader/load_session.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/verify_json.h"
#include "verifier/cli_util.h"
#include "verifier/load_cli.h"
#ifdef PTD_HAVE_CUDA
#include "ptd/cuda_device.h"
#endif

#ifndef PTD_VERSION
#define PTD_VERSION "unknown"
#endif

namespace ptd_load {
namespace {

using json = nlohmann::ordered_json;

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

// The device to load onto, with --huge-pages on the host.
absl::StatusOr<std::shared_ptr<ptd::Device>> OpenLoadDevice(const Args& a) {
  auto device = ptd::OpenDevice(a.device_spec);
  if (!device.ok() || a.huge_pages == "auto") return device;
  if ((*device)->kind() != ptd::DeviceKind::kHost) {
    return absl::InvalidArgumentError("--huge-pages applies to --device host");
  }
  return std::shared_ptr<ptd::Device>(std::make_shared<ptd::HostDevice>(ptd::HostMemoryOptions{
      .huge_pages = a.huge_pages == "on" ? ptd::HugePages::kOn : ptd::HugePages::kOff}));
}

// A load option the device cannot take (InapplicableLoadOption), in the
// flags' words; reported as a device that cannot be opened (JSON included).
absl::Status InapplicableFlag(const Args& a, ptd::LoadOptionField field) {
  return absl::InvalidArgumentError(absl::StrCat(
      field == ptd::LoadOptionField::kDeviceBudgetBytes ? "--device-budget" : "--host-fqn",
      " applies to a CUDA device; --device ", a.device_spec,
      " loads every weight into host memory already"));
}

// What to verify: every load reads from the verified bundle.
ptd::VerifyOptions VerifyOptionsOf(const Args& a) {
  ptd::VerifyOptions vo{
      .paths = {.ptd = a.ptd_path, .manifest = a.manifest, .pte = a.pte, .use_mmap = false},
      .sm = a.sm};
  // The readable report (of a file that fails) prints kReportRows of each
  // table; --json and the digests go through every weight.
  if (!a.json_out && !a.digest && !a.all_rows) vo.list_limit = ptd::cli::kReportRows;
  return vo;
}

// How to load (the flags past the inputs).
ptd::LoadOptions LoadOptionsOf(const Args& a) {
  return ptd::LoadOptions{.fqns = a.fqns,
                          .sm = a.sm,
                          .threads = a.threads,
                          .map_file = a.map_file,
                          .device_budget_bytes = a.device_budget,
                          .host_fqns = a.host_fqns,
                          .share_segments = a.share_segments,
                          .io = *ptd::ParseIoMode(a.io),
                          .signature = a.signature};
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

// Prints the report of a verification that failed.
int VerifyFailed(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device) {
  if (!a.json_out) return ptd::cli::PrintVerifyOutcome("ptd-load", outcome, nullptr, a.all_rows);
  json& j = ptd::cli::KeepUntilExit(
      ptd::VerifyJson(outcome, ptd::JsonExtras{.names = ptd::cli::ToolInputNames()}));
  j["device"] = DeviceJson(device);
  return ptd::cli::PrintVerifyOutcome("ptd-load", outcome, &j, a.all_rows);
}
// Loads `repeat` times from the verified bundle, one load's memory at a
// time; the first failure is returned.
absl::Status LoadRepeatedly(const Args& a, const ptd::internal::VerifiedLoad& v, Loads* loads) {
  ptd::LoadOptions lo = LoadOptionsOf(a);
  ptd::cli::ProgressBar bar;
  if (::isatty(STDERR_FILENO) != 0) {
    lo.progress = [&bar](uint64_t done, uint64_t total) { return bar.Update(done, total); };
  }
  // The last load is left to process exit, as the outcome is.
  loads->last = &ptd::cli::KeepUntilExit(std::optional<ptd::LoadedWeights>());
  for (int i = 0; i < a.repeat; ++i) {
    loads->last->reset();  // One load's memory at a time.
    const uint64_t huge_before = v.device->stats().huge_page_bytes;
    bar.Start(a.repeat > 1 ? absl::StrCat("loading ", i + 1, "/", a.repeat) : "loading");
    // The outcome keeps the bundle to exit: the result shares it (views into
    // its manifests instead of copies of 100,000 names).
    auto w = ptd::internal::LoadVerified(v, lo);
    bar.Erase();
    if (!w.ok()) return w.status();
    loads->totals.push_back(w->timings().total_s);
    loads->huge_page_bytes = v.device->stats().huge_page_bytes - huge_before;
    loads->last->emplace(*std::move(w));
  }
  return absl::OkStatus();
}

// A load that failed after verification: I2, exit code 2; a signed load
// that broke an A-rule: that rule, exit code 1.
int LoadFailed(const Args& a, const ptd::VerifyOutcome& outcome, const ptd::Device& device,
               const absl::Status& s) {
  const std::optional<ptd::Diagnostic> signature_failure =
      ptd::internal::SignatureFailure(s, a.signature);
  if (a.json_out) {
    json j = ptd::VerifyJson(outcome, ptd::JsonExtras{.names = ptd::cli::ToolInputNames()});
    j["device"] = DeviceJson(device);
    j["ok"] = false;
    j["error"] = std::string(s.message());
    if (signature_failure) {
      j["errors"].push_back(ptd::DiagnosticJson(*signature_failure));
      j["signature"] = ptd::internal::SignatureReportJson(
          ptd::SignatureReport::OfFailedLoad(a.signature, a.ptd_path, s));
    } else {
      j["errors"].push_back(LoadErrorJson(s, a.ptd_path));
    }
    ptd::cli::WriteOut(ptd::DumpJson(j));
  }
  std::cerr << "ptd-load: " << s.message() << "\n";
  return signature_failure ? 1 : 2;
}

// parse -> open the device -> verify -> load -> report.
int Main(int argc, char** argv) {
#ifdef PTD_HAVE_CUDA
  ptd::RegisterCudaDevice();
#endif
  Args a;
  if (const std::optional<int> rc = Parse(argc, argv, &a)) return *rc;
  auto device = OpenLoadDevice(a);
  if (!device.ok()) return DeviceFailed(a, device.status());
  // Kept to exit, as the load that shares its bundle.
  const ptd::internal::VerifiedLoad& v = ptd::cli::KeepUntilExit(
      ptd::internal::VerifyForLoad(*std::move(device), VerifyOptionsOf(a), LoadOptionsOf(a)));
  if (v.inapplicable) return DeviceFailed(a, InapplicableFlag(a, *v.inapplicable));
  const ptd::VerifyOutcome& outcome = *v.outcome;
  if (!v.loadable()) return VerifyFailed(a, outcome, *v.device);
  Loads loads;
  const absl::Status loaded = LoadRepeatedly(a, v, &loads);
  if (!loaded.ok()) return LoadFailed(a, outcome, *v.device, loaded);
  const LoadResults r = CollectResults(a, outcome, **loads.last);
  return a.json_out ? ReportJson(a, outcome, *v.device, loads, r)
                    : ReportText(a, outcome, *v.device, loads, r);
}

}  // namespace
}  // namespace ptd_load

int main(int argc, char** argv) {
  ptd::cli::UseHugePageMalloc();
  ptd::cli::FixMallocMmapThreshold();
  return ptd::cli::RunGuarded("ptd-load", [&] { return ptd_load::Main(argc, argv); });
}
