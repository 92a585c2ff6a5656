// load(): open the device, verify once, load from the verified bundle
// (runtime/loader/load_session.h, as ptd-load does), and return a _Weights,
// or the verification's report when a rule is broken.
#include <Python.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nanobind/nanobind.h"
#include "nanobind/stl/optional.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "nlohmann/json.hpp"

#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/open_device.h"
#include "ptd/rules.h"
#include "ptd/verify.h"
#include "python/src/module.h"
#include "runtime/loader/load_report_json.h"
#include "runtime/loader/load_session.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/verify_json.h"

namespace ptd_python {
namespace {

using ptd::LoadedWeights;

// What the progress callback saw: a Python exception to re-raise, or a
// False return.
struct ProgressState {
  nb::object fn;
  std::optional<nb::python_error> error;
  bool stopped = false;
};

// A load option the device cannot take (InapplicableLoadOption), in
// Python's words: a ValueError.
std::string InapplicableArgument(ptd::LoadOptionField field, const std::string& spec) {
  return absl::StrCat(
      field == ptd::LoadOptionField::kDeviceBudgetBytes ? "device_budget" : "host_fqns",
      " applies to a CUDA device; device=\"", spec,
      "\" is the host (every storage is in host memory already)");
}

// A load that failed after verification, as Python's exception.
[[noreturn]] void RaiseLoadError(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) {
    nb::object cancelled = nb::module_::import_("ptd").attr("CancelledError");
    PyErr_SetString(cancelled.ptr(), std::string(s.message()).c_str());
    throw nb::python_error();
  }
  if (s.code() == absl::StatusCode::kNotFound) {
    // An fqn in no manifest: the files were all opened above.
    PyErr_SetString(PyExc_KeyError, std::string(s.message()).c_str());
    throw nb::python_error();
  }
  RaiseStatus(s);
}

// The loader's progress callback, over `state`. Called by one loader thread
// at a time; takes the GIL for the callback and for pending signals (Ctrl-C
// cancels a load in the main thread).
std::function<bool(uint64_t, uint64_t)> ProgressCallback(ProgressState& state) {
  return [&state](uint64_t done, uint64_t total) -> bool {
    nb::gil_scoped_acquire acquire;
    if (state.error || state.stopped) return false;
    if (PyErr_CheckSignals() != 0) {
      state.error.emplace();
      return false;
    }
    if (state.fn.is_none()) return true;
    try {
      nb::object r = state.fn(done, total);
      if (r.is(Py_False)) {
        state.stopped = true;
        return false;
      }
    } catch (nb::python_error& e) {
      state.error.emplace(std::move(e));
      return false;
    } catch (...) {
      state.stopped = true;
      return false;
    }
    return true;
  };
}

// A signed load that broke an A-rule: the report of that rule (the caller
// raises ptd.VerifyError), with the signature object; nullopt for any other
// failure.
std::optional<nb::object> FailedSignedLoad(const absl::Status& status,
                                           const ptd::LoadOptions& options,
                                           const std::string& ptd_path) {
  const std::optional<ptd::Diagnostic> failure =
      ptd::internal::SignatureFailure(status, options.signature);
  if (!failure) return std::nullopt;
  nlohmann::ordered_json j{
      {"ok", false},
      {"errors", nlohmann::ordered_json::array({ptd::DiagnosticJson(*failure)})},
      {"warnings", nlohmann::ordered_json::array()},
      {"signature", ptd::internal::SignatureReportJson(
                        ptd::SignatureReport::OfFailedLoad(options.signature, ptd_path, status))}};
  return ToPython(j);
}

nb::object Load(std::string ptd_path, std::optional<std::string> manifest,
                std::optional<std::string> pte, std::string device_spec,
                std::optional<std::vector<std::string>> fqns, std::optional<uint32_t> sm,
                std::optional<size_t> threads, bool map_file, nb::object progress,
                std::optional<uint64_t> device_budget, std::vector<std::string> host_fqns,
                std::string io, bool share_segments, std::optional<std::string> signature,
                std::optional<std::string> public_key, std::optional<std::string> certificate_chain,
                std::optional<std::string> model_dir) {
  ptd::LoadOptions lo;
  lo.signature = SignatureArgs(signature, public_key, certificate_chain, model_dir);
  const std::optional<ptd::IoMode> io_mode = ptd::ParseIoMode(io);
  if (!io_mode) {
    throw nb::value_error(
        absl::StrCat("io must be \"auto\", \"buffered\", \"direct\" or \"gds\", not \"", io, "\"")
            .c_str());
  }
  lo.io = *io_mode;
  lo.share_segments = share_segments;
  lo.map_file = map_file;
  lo.device_budget_bytes = device_budget;
  lo.host_fqns = host_fqns;
  if (fqns) lo.fqns = *fqns;
  lo.sm = sm;
  if (threads) lo.threads = *threads;
  ProgressState state{.fn = progress};
  lo.progress = ProgressCallback(state);

  absl::StatusOr<std::shared_ptr<ptd::Device>> device;
  std::optional<ptd::internal::VerifiedLoad> v;
  ptd::internal::LoadFacts facts{.threads = lo.threads, .device_budget = device_budget};
  absl::StatusOr<LoadedWeights> loaded = absl::UnknownError("not loaded");
  {
    nb::gil_scoped_release release;
    device = ptd::OpenDevice(device_spec);
    if (device.ok()) {
      // Verified once: a file that breaks a rule returns its report; one
      // that passes is loaded from the bundle verified here, the timings
      // counting the verification, as ptd-load's do.
      v = ptd::internal::VerifyForLoad(
          *device,
          ptd::VerifyOptions{.paths = {.ptd = ptd_path, .manifest = manifest, .pte = pte},
                             .sm = sm},
          lo);
      if (v->loadable()) {
        const uint64_t huge_before = (*device)->stats().huge_page_bytes;
        loaded = ptd::internal::LoadVerified(*v, lo);
        facts.huge_page_bytes = (*device)->stats().huge_page_bytes - huge_before;
      }
    }
  }
  if (!device.ok()) {
    if (device.status().code() == absl::StatusCode::kInvalidArgument) {
      throw nb::value_error(std::string(device.status().message()).c_str());
    }
    PyErr_SetString(PyExc_RuntimeError, std::string(device.status().message()).c_str());
    throw nb::python_error();
  }
  if (v->inapplicable)
    throw nb::value_error(InapplicableArgument(*v->inapplicable, device_spec).c_str());
  const ptd::VerifyOutcome* outcome = &*v->outcome;
  RaiseIfUnreadable(*outcome);
  if (!outcome->report.ok()) return ReportDict(*outcome);
  if (state.error) {
    state.error->restore();
    throw nb::python_error();
  }
  if (!loaded.ok()) {
    if (std::optional<nb::object> report = FailedSignedLoad(loaded.status(), lo, ptd_path)) {
      return *std::move(report);
    }
    RaiseLoadError(loaded.status());
  }
  const bool by_key = outcome->bundle->manifests().empty();
  auto shared = std::make_shared<const LoadedWeights>(*std::move(loaded));
  return MakeWeights(std::move(shared), by_key, std::move(facts));
}

}  // namespace

void DefineLoad(nb::module_& m) {
  m.def("load", &Load, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("device"), nb::arg("fqns").none(), nb::arg("sm").none(), nb::arg("threads").none(),
        nb::arg("map_file"), nb::arg("progress").none(), nb::arg("device_budget").none(),
        nb::arg("host_fqns"), nb::arg("io"), nb::arg("share_segments"), nb::arg("signature").none(),
        nb::arg("public_key").none(), nb::arg("certificate_chain").none(),
        nb::arg("model_dir").none(),
        "Opens, verifies and loads: a _Weights, or the verification dict when a rule is broken.");
}

}  // namespace ptd_python
