// _ptd: the native half of the Python module `ptd` (python/ptd/__init__.py
// is the public surface). A thin binding: it converts types, releases the
// GIL around verification, loading, writing, extracting and re-weighting,
// and maps absl::Status codes to Python's exceptions. Every rule, message
// and byte decision stays in runtime/ (RunVerify's outcome, rendered by
// VerifyJson, is the object `ptd-verify --json` prints).
#include <Python.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nanobind/nanobind.h"
#include "nanobind/ndarray.h"
#include "nanobind/stl/optional.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "nlohmann/json.hpp"

#include "ptd/checkpoint.h"
#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/manifest.h"
#include "ptd/open_device.h"
#include "ptd/report.h"
#include "ptd/safetensors.h"
#include "ptd/scalar_type.h"
#include "ptd/verify.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_writer.h"
#include "runtime/loader/io_report_json.h"
#include "runtime/signing/signature_report_json.h"
#include "runtime/verify/verify_json.h"

namespace nb = nanobind;

namespace ptd_python {
namespace {

using ptd::LoadedWeight;
using ptd::LoadedWeights;

// ---- dtypes ----------------------------------------------------------------

// ScalarType (0..29) -> the name Python users know (torch's spelling) and
// the DLPack type; code 255 = no DLPack type.
struct DtypeInfo {
  const char* name;
  uint8_t dl_code;
  uint8_t dl_bits;
};
constexpr uint8_t kNoDl = 255;
constexpr uint8_t kDlInt = 0, kDlUInt = 1, kDlFloat = 2, kDlBfloat = 4, kDlComplex = 5, kDlBool = 6,
                  kDlF8e4m3fn = 10, kDlF8e4m3fnuz = 11, kDlF8e5m2 = 12, kDlF8e5m2fnuz = 13;
constexpr DtypeInfo kDtypes[ptd::kNumScalarTypes] = {
    {"uint8", kDlUInt, 8},
    {"int8", kDlInt, 8},
    {"int16", kDlInt, 16},
    {"int32", kDlInt, 32},
    {"int64", kDlInt, 64},
    {"float16", kDlFloat, 16},
    {"float32", kDlFloat, 32},
    {"float64", kDlFloat, 64},
    {"complex32", kDlComplex, 32},
    {"complex64", kDlComplex, 64},
    {"complex128", kDlComplex, 128},
    {"bool", kDlBool, 8},
    {"qint8", kNoDl, 8},
    {"quint8", kNoDl, 8},
    {"qint32", kNoDl, 32},
    {"bfloat16", kDlBfloat, 16},
    {"quint4x2", kNoDl, 8},
    {"quint2x4", kNoDl, 8},
    {"bits1x8", kNoDl, 8},
    {"bits2x4", kNoDl, 8},
    {"bits4x2", kNoDl, 8},
    {"bits8", kNoDl, 8},
    {"bits16", kNoDl, 16},
    {"float8_e5m2", kDlF8e5m2, 8},
    {"float8_e4m3fn", kDlF8e4m3fn, 8},
    {"float8_e5m2fnuz", kDlF8e5m2fnuz, 8},
    {"float8_e4m3fnuz", kDlF8e4m3fnuz, 8},
    {"uint16", kDlUInt, 16},
    {"uint32", kDlUInt, 32},
    {"uint64", kDlUInt, 64},
};

const char* DtypeName(int32_t t) {
  if (t < 0 || t >= ptd::kNumScalarTypes) return "unknown";
  return kDtypes[t].name;
}

// The ScalarType of a DLPack type, or -1.
int32_t ScalarTypeOfDl(uint8_t code, uint8_t bits) {
  for (int32_t t = 0; t < ptd::kNumScalarTypes; ++t) {
    if (kDtypes[t].dl_code == code && kDtypes[t].dl_bits == bits) return t;
  }
  return -1;
}

// ---- errors ----------------------------------------------------------------

// Raises OSError(errno, message): Python makes it FileNotFoundError for a
// missing file, PermissionError for EACCES.
[[noreturn]] void RaiseOSError(const absl::Status& s) {
  int err = EIO;
  if (s.code() == absl::StatusCode::kNotFound) err = ENOENT;
  if (s.code() == absl::StatusCode::kPermissionDenied) err = EACCES;
  nb::object e = nb::handle(PyExc_OSError)(err, std::string(s.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
  throw nb::python_error();
}

[[noreturn]] void RaiseStatus(const absl::Status& s) {
  const std::string msg(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw nb::value_error(msg.c_str());
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kDataLoss:
      RaiseOSError(s);
    case absl::StatusCode::kResourceExhausted:
      PyErr_SetString(PyExc_MemoryError, msg.c_str());
      throw nb::python_error();
    default:
      PyErr_SetString(PyExc_RuntimeError, msg.c_str());
      throw nb::python_error();
  }
}

// ---- JSON -> Python ----------------------------------------------------------

// Strings from a file need not be UTF-8: invalid bytes become U+FFFD, as in
// `ptd-verify --json`.
nb::object Str(const std::string& s) {
  return nb::steal(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

nb::object ToPython(const nlohmann::ordered_json& j) {
  using V = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case V::null:
    case V::discarded:
      return nb::none();
    case V::boolean:
      return nb::bool_(j.get<bool>());
    case V::number_integer:
      return nb::steal(PyLong_FromLongLong(j.get<int64_t>()));
    case V::number_unsigned:
      return nb::steal(PyLong_FromUnsignedLongLong(j.get<uint64_t>()));
    case V::number_float:
      return nb::float_(j.get<double>());
    case V::string:
      return Str(j.get_ref<const std::string&>());
    case V::binary: {
      const auto& b = j.get_binary();
      return nb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
    }
    case V::array: {
      nb::list l;
      for (const auto& v : j) l.append(ToPython(v));
      return std::move(l);
    }
    case V::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[Str(k)] = ToPython(v);
      return std::move(d);
    }
  }
  return nb::none();
}

// ---- verify ------------------------------------------------------------------

// A file that could be opened but not read (it shrank, an I/O error) is
// OSError; one that cannot be opened too.
void RaiseIfUnreadable(const ptd::VerifyOutcome& outcome) {
  if (const ptd::InputError* e = outcome.io_error()) {
    if (outcome.bundle == nullptr) RaiseOSError(e->status);
    RaiseOSError(absl::DataLossError(e->status.message()));
  }
}

// The report of a verification as `ptd-verify --json` prints it, with hints
// in Python's words ("...: pass it as manifest=").
nb::object ReportDict(const ptd::VerifyOutcome& outcome) {
  ptd::JsonExtras extras;
  extras.names =
      ptd::InputNames{.ptd = "as the first argument", .manifest = "as manifest=", .pte = "as pte="};
  return ToPython(ptd::VerifyJson(outcome, extras));
}

// The signature arguments of verify() and load() (ptd/model_signature.h);
// ValueError for a key or chain without a signature, or neither with one.
ptd::SignatureOptions SignatureArgs(std::optional<std::string> signature,
                                    std::optional<std::string> public_key,
                                    std::optional<std::string> certificate_chain,
                                    std::optional<std::string> model_dir) {
  ptd::SignatureOptions o;
  if (!signature) {
    if (public_key || certificate_chain || model_dir) {
      throw nb::value_error("public_key, certificate_chain and model_dir need signature=");
    }
    return o;
  }
  if (public_key.has_value() == certificate_chain.has_value()) {
    throw nb::value_error(
        "signature= needs exactly one of public_key= and certificate_chain= (the trust material "
        "is never taken from the signature file)");
  }
  o.signature = *signature;
  o.public_key = public_key.value_or("");
  o.certificate_chain = certificate_chain.value_or("");
  o.model_dir = model_dir.value_or("");
  return o;
}

nb::object Verify(std::string ptd_path, std::optional<std::string> manifest,
                  std::optional<std::string> pte, std::optional<uint32_t> sm, bool digest,
                  uint64_t digest_limit, std::optional<std::string> signature,
                  std::optional<std::string> public_key,
                  std::optional<std::string> certificate_chain,
                  std::optional<std::string> model_dir) {
  ptd::VerifyOptions options;
  options.signature = SignatureArgs(signature, public_key, certificate_chain, model_dir);
  options.ptd_path = ptd_path;
  options.manifest_path = manifest;
  options.pte_path = pte;
  options.sm = sm;
  options.digest = digest;
  options.digest_limit = digest_limit;
  ptd::VerifyOutcome outcome;
  {
    nb::gil_scoped_release release;
    outcome = ptd::RunVerify(options);
  }
  RaiseIfUnreadable(outcome);
  return ReportDict(outcome);
}

// ---- loaded weights ------------------------------------------------------------

class Weights;

// The module's one device vocabulary: "host" or "cuda:N" (what OpenDevice
// takes; Device::name() is the long description, "cuda:0 (NVIDIA H200,
// sm_90)").
std::string DeviceName(ptd::DeviceKind kind, int index) {
  const std::string name(ptd::DeviceKindName(kind));
  return kind == ptd::DeviceKind::kCuda ? absl::StrCat(name, ":", index) : name;
}

// One loaded weight. Holds the LoadedWeights, so its storage lives as long as
// this object (and any DLPack capsule, which holds this object).
class Tensor {
 public:
  Tensor(std::shared_ptr<const LoadedWeights> weights, const LoadedWeight* w, int32_t dtype)
      : weights_(std::move(weights)), w_(w), dtype_(dtype) {}

  std::string fqn() const { return std::string(w_->fqn); }
  std::string storage_key() const { return std::string(w_->storage_key); }
  std::string source() const { return std::string(w_->source); }
  std::string dtype() const { return DtypeName(dtype_); }
  int32_t scalar_type() const { return dtype_; }
  uint32_t itemsize() const { return w_->element_size; }
  nb::tuple shape() const { return Tuple(w_->sizes); }
  nb::tuple strides() const { return Tuple(w_->strides); }
  int64_t offset() const { return w_->storage_offset; }
  uint64_t storage_nbytes() const { return storage().nbytes; }
  bool is_cuda() const { return storage().device == ptd::DeviceKind::kCuda; }
  // "device", "mapped_host" or "host" (ptd::ResidencyName).
  std::string residency() const { return std::string(ptd::ResidencyName(w_->residency)); }
  int device_index() const { return weights_->DeviceOf(storage()).index(); }
  // "host" or "cuda:N".
  std::string device() const {
    return DeviceName(storage().device, is_cuda() ? device_index() : 0);
  }
  // (kDLCPU, 0) or (kDLCUDA, index).
  nb::tuple dlpack_device() const {
    return is_cuda() ? nb::make_tuple(nb::device::cuda::value, device_index())
                     : nb::make_tuple(nb::device::cpu::value, 0);
  }

  // The same view with another dtype of the same element size (bf16 as
  // uint16 for NumPy, which has no bfloat16).
  Tensor Reinterpret(int32_t dtype) const {
    const std::optional<uint32_t> size = ptd::ElementSize(dtype);
    if (!size) throw nb::value_error("unknown dtype");
    if (*size != w_->element_size) {
      throw nb::value_error(absl::StrCat("cannot view ", DtypeName(dtype_), " (", w_->element_size,
                                         " bytes) as ", DtypeName(dtype), " (", *size, " bytes)")
                                .c_str());
    }
    return Tensor(weights_, w_, dtype);
  }

  // A nanobind ndarray over the view (zero-copy: base pointer of the
  // storage, byte offset, sizes and strides in elements, read-only), whose
  // owner is `self`; its __dlpack__ makes the capsule.
  nb::object Array(nb::handle self) const {
    const DtypeInfo& info = kDtypes[dtype_];
    if (info.dl_code == kNoDl) {
      PyErr_Format(PyExc_BufferError, "weight '%s': dtype %s has no DLPack type", fqn().c_str(),
                   info.name);
      throw nb::python_error();
    }
    const ptd::LoadedStorage& s = storage();
    std::vector<size_t> shape(w_->sizes.begin(), w_->sizes.end());
    const uint64_t byte_offset = static_cast<uint64_t>(w_->storage_offset) * w_->element_size;
    nb::dlpack::dtype dt{info.dl_code, info.dl_bits, 1};
    nb::ndarray<nb::ro, nb::array_api> a(
        s.buffer.data(), shape.size(), shape.data(), self, w_->strides.data(), dt,
        is_cuda() ? nb::device::cuda::value : nb::device::cpu::value,
        is_cuda() ? device_index() : 0, 0, byte_offset);
    return nb::cast(std::move(a), nb::rv_policy::reference);
  }

 private:
  static nb::tuple Tuple(absl::Span<const int64_t> v) {
    nb::list l;
    for (int64_t x : v) l.append(x);
    return nb::tuple(l);
  }
  const ptd::LoadedStorage& storage() const { return weights_->storage(*w_); }

  std::shared_ptr<const LoadedWeights> weights_;
  const LoadedWeight* w_;
  int32_t dtype_;
};

class Weights {
 public:
  explicit Weights(std::shared_ptr<const LoadedWeights> w, bool by_key)
      : w_(std::move(w)),
        by_key_(by_key),
        device_(DeviceName(w_->device()->kind(), w_->device()->index())),
        device_description_(w_->device()->name()) {
    if (by_key_) {
      for (const ptd::LoadedStorage& s : w_->storages()) {
        for (std::string_view k : s.keys) names_.emplace_back(k);
      }
    } else {
      for (const LoadedWeight& lw : w_->weights()) {
        if (w_->Find(lw.fqn) == &lw) names_.emplace_back(lw.fqn);
      }
    }
  }

  bool by_key() const { return by_key_; }
  const std::vector<std::string>& names() const { return names_; }
  // "host" or "cuda:N".
  const std::string& device() const { return device_; }
  // "host" or "cuda:0 (NVIDIA H200, sm_90)" (Device::name()).
  const std::string& device_description() const { return device_description_; }

  nb::object Get(const std::string& name) const {
    if (by_key_) {
      const ptd::LoadedStorage* s = w_->FindStorage(name);
      if (s == nullptr) throw nb::key_error(name.c_str());
      return Bytes(*s);
    }
    const LoadedWeight* lw = w_->Find(name);
    if (lw == nullptr) throw nb::key_error(name.c_str());
    return nb::cast(Tensor(w_, lw, lw->dtype));
  }

  nb::dict timings() const {
    const ptd::LoadTimings& t = w_->timings();
    nb::dict d;
    d["verify_s"] = t.verify_s;
    d["plan_s"] = t.plan_s;
    d["allocate_s"] = t.allocate_s;
    d["read_s"] = t.read_s;
    d["copy_s"] = t.copy_s;
    d["wait_s"] = t.wait_s;
    d["map_s"] = t.map_s;
    d["finish_s"] = t.finish_s;
    d["total_s"] = t.total_s;
    d["first_weight_s"] = t.first_weight_s;
    return d;
  }
  nb::dict stats() const {
    const ptd::LoadStats& s = w_->stats();
    nb::dict d;
    d["weights"] = s.weights;
    d["storages"] = s.storages;
    d["bytes"] = s.bytes;
    d["allocations"] = s.allocations;
    d["reads"] = s.reads;
    d["bytes_read"] = s.bytes_read;
    d["copies"] = s.copies;
    d["copy_calls"] = s.copy_calls;
    d["bytes_via_scratch"] = s.bytes_via_scratch;
    d["reused"] = s.reused;
    d["runtime_owned"] = s.runtime_owned;
    d["mapped"] = s.mapped;
    d["mapped_bytes"] = s.mapped_bytes;
    d["mappings"] = s.mappings;
    return d;
  }
  // How the bytes were read, as `ptd-load --json`'s load.io (one renderer:
  // runtime/loader/io_report_json.h).
  nb::object io() const { return ToPython(ptd::internal::IoReportJson(w_->stats().io)); }
  // The signature check (runtime/signing/signature_report_json.h); None when
  // the load had no signature.
  nb::object signature() const {
    if (!w_->stats().signature.checked) return nb::none();
    return ToPython(ptd::internal::SignatureReportJson(w_->stats().signature));
  }
  // Where the storages went, as `ptd-load --json`'s "placement":
  // {"device": {"storages": n, "bytes": n}, "mapped_host": ..., "host": ...}.
  nb::dict placement() const {
    const ptd::LoadStats& s = w_->stats();
    nb::dict d;
    for (const ptd::Residency r : ptd::kAllResidencies) {
      nb::dict p;
      p["storages"] = s.placed(r).storages;
      p["bytes"] = s.placed(r).bytes;
      d[std::string(ptd::ResidencyName(r)).c_str()] = p;
    }
    return d;
  }
  // Runtime-owned entries (the off-graph KV cache): not loaded; what a
  // runtime needs to allocate them.
  nb::list runtime_owned() const {
    nb::list out;
    for (const ptd::RuntimeOwnedWeight& r : w_->runtime_owned()) {
      nb::dict d;
      d["fqn"] = std::string(r.fqn);
      d["dtype"] = std::string(DtypeName(r.dtype));
      d["shape"] = nb::tuple(nb::cast(std::vector<int64_t>(r.sizes.begin(), r.sizes.end())));
      d["strides"] = nb::tuple(nb::cast(std::vector<int64_t>(r.strides.begin(), r.strides.end())));
      d["offset"] = r.storage_offset;
      d["required_nbytes"] = r.required_nbytes;
      d["storage_key"] = std::string(r.storage_key);
      d["storage_nbytes"] = r.storage_nbytes;
      d["source"] = std::string(r.source);
      out.append(d);
    }
    return out;
  }

 private:
  // A key's bytes (a copy; read back from the device when needed).
  nb::object Bytes(const ptd::LoadedStorage& s) const {
    PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(s.nbytes));
    if (b == nullptr) throw nb::python_error();
    nb::object out = nb::steal(b);
    if (s.nbytes == 0) return out;
    char* dst = PyBytes_AS_STRING(b);
    if (s.host_accessible) {
      std::memcpy(dst, s.buffer.data(), s.nbytes);
    } else {
      absl::Status st;
      {
        nb::gil_scoped_release release;
        st = w_->DeviceOf(s).CopyToHost(dst, s.buffer.data(), s.nbytes);
      }
      if (!st.ok()) RaiseStatus(st);
    }
    return out;
  }

  std::shared_ptr<const LoadedWeights> w_;
  bool by_key_;
  std::string device_;
  std::string device_description_;
  std::vector<std::string> names_;
};

// What the progress callback saw: a Python exception to re-raise, or a
// False return.
struct ProgressState {
  nb::object fn;
  std::optional<nb::python_error> error;
  bool stopped = false;
};

// The device of `spec`; a placed load on the host is InvalidArgument, in
// the caller's words (LoadWeights would name LoadOptions' fields), as
// ptd-load does for --device-budget and --host-fqn.
absl::StatusOr<std::shared_ptr<ptd::Device>> OpenPlacedDevice(
    const std::string& spec, const std::optional<uint64_t>& device_budget,
    const std::vector<std::string>& host_fqns) {
  auto device = ptd::OpenDevice(spec);
  const bool placing = device_budget.has_value() || !host_fqns.empty();
  if (device.ok() && placing && (*device)->kind() == ptd::DeviceKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        device_budget ? "device_budget" : "host_fqns", " applies to a CUDA device; device=\"", spec,
        "\" is the host (every storage is in host memory already)"));
  }
  return device;
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
  // Called by one loader thread at a time; takes the GIL for the callback
  // and for pending signals (Ctrl-C cancels a load in the main thread).
  lo.progress = [&state](uint64_t done, uint64_t total) -> bool {
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

  absl::StatusOr<std::shared_ptr<ptd::Device>> device;
  std::optional<ptd::VerifyOutcome> outcome;
  absl::StatusOr<LoadedWeights> loaded = absl::UnknownError("not loaded");
  {
    nb::gil_scoped_release release;
    device = OpenPlacedDevice(device_spec, device_budget, host_fqns);
    if (device.ok()) {
      // Verified once: a file that breaks a rule returns its report; one
      // that passes is loaded from the bundle verified here.
      const auto verify_t0 = std::chrono::steady_clock::now();
      outcome = ptd::RunVerify(ptd::VerifyOptions{
          .ptd_path = ptd_path, .manifest_path = manifest, .pte_path = pte, .sm = sm});
      // The timings count the verification, as ptd-load's do.
      lo.verify_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - verify_t0).count();
      if (outcome->exit_code() == 0) loaded = ptd::LoadWeights(outcome->bundle, *device, lo);
    }
  }
  if (!device.ok()) {
    if (device.status().code() == absl::StatusCode::kInvalidArgument) {
      throw nb::value_error(std::string(device.status().message()).c_str());
    }
    PyErr_SetString(PyExc_RuntimeError, std::string(device.status().message()).c_str());
    throw nb::python_error();
  }
  RaiseIfUnreadable(*outcome);
  if (!outcome->report.ok()) return ReportDict(*outcome);
  if (state.error) {
    state.error->restore();
    throw nb::python_error();
  }
  if (!loaded.ok()) {
    // A signed load that broke an A-rule: the report of that rule (the
    // caller raises ptd.VerifyError), with the signature object.
    const std::string message(loaded.status().message());
    const std::optional<std::string_view> rule = ptd::RuleOfMessage(message);
    if (rule && rule->front() == 'A' && lo.signature.enabled()) {
      nlohmann::ordered_json j{
          {"ok", false},
          {"errors", nlohmann::ordered_json::array()},
          {"warnings", nlohmann::ordered_json::array()},
          {"signature", ptd::internal::SignatureReportJson(ptd::SignatureReport::OfFailedLoad(
                            lo.signature, ptd_path, loaded.status()))}};
      j["errors"].push_back(
          nlohmann::ordered_json{{"rule", std::string(*rule)},
                                 {"message", message},
                                 {"code", absl::StatusCodeToString(loaded.status().code())},
                                 {"file", lo.signature.signature}});
      return ToPython(j);
    }
    RaiseLoadError(loaded.status());
  }
  const bool by_key = outcome->bundle->manifests().empty();
  auto shared = std::make_shared<const LoadedWeights>(*std::move(loaded));
  return nb::cast(Weights(std::move(shared), by_key));
}

// ---- write -------------------------------------------------------------------

// A buffer's bytes as a span; the caller keeps `obj` alive.
struct BufferView {
  Py_buffer view{};
  bool held = false;
  explicit BufferView(nb::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
    held = true;
  }
  ~BufferView() {
    if (held) PyBuffer_Release(&view);
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  absl::Span<const uint8_t> span() const {
    return {static_cast<const uint8_t*>(view.buf), static_cast<size_t>(view.len)};
  }
};

int64_t Int(nb::handle h) { return nb::cast<int64_t>(h); }

std::vector<int64_t> Ints(nb::handle seq) {
  std::vector<int64_t> out;
  for (nb::handle h : seq) out.push_back(Int(h));
  return out;
}

// specs: [(fqn, storage buffer, dtype, device_type, sizes, strides, offset,
//          original_storage, (shape, stride, offset, storage_size|None))]
// variants: [(target_sm, ptx_compute, flags, so_blob_key)]
void Write(std::string ptd_path, std::optional<std::string> manifest_path, nb::list specs,
           std::string format, nb::list variants, std::string so_blob_key,
           uint64_t segment_alignment) {
  constexpr ptd::ManifestFormat kFormats[] = {ptd::ManifestFormat::kFqn0,
                                              ptd::ManifestFormat::kFqn3};
  std::optional<ptd::ManifestFormat> mf;
  for (const ptd::ManifestFormat f : kFormats) {
    if (format == ptd::ManifestFormatName(f)) mf = f;
  }
  if (!mf) {
    throw nb::value_error(absl::StrCat("format must be \"", std::string(ptd::kManifestMagicFqn0),
                                       "\" or \"", std::string(ptd::kManifestMagicFqn3),
                                       "\", not \"", format, "\"")
                              .c_str());
  }
  std::vector<ptd::Variant> vs;
  for (nb::handle v : variants) {
    nb::tuple t = nb::cast<nb::tuple>(v);
    vs.push_back(ptd::Variant{.target_sm = nb::cast<uint32_t>(t[0]),
                              .ptx_compute = nb::cast<uint32_t>(t[1]),
                              .flags = nb::cast<uint32_t>(t[2]),
                              .so_blob_key = nb::cast<std::string>(t[3])});
  }
  if (segment_alignment == 0 || (segment_alignment & (segment_alignment - 1)) != 0) {
    throw nb::value_error("segment_alignment must be a power of two");
  }
  ptd::CudaWeightWriter writer(so_blob_key, std::move(vs),
                               ptd::PtdWriterOptions{.segment_alignment = segment_alignment}, *mf);
  std::vector<std::unique_ptr<BufferView>> buffers;
  for (nb::handle h : specs) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    buffers.push_back(std::make_unique<BufferView>(t[1]));
    nb::tuple props = nb::cast<nb::tuple>(t[8]);
    ptd::WeightSpec spec{
        .fqn = nb::cast<std::string>(t[0]),
        .dtype = nb::cast<int32_t>(t[2]),
        .device_type = nb::cast<int32_t>(t[3]),
        .value = {.storage = buffers.back()->span(),
                  .storage_offset = Int(t[6]),
                  .sizes = Ints(t[4]),
                  .strides = Ints(t[5]),
                  .is_original_storage = nb::cast<bool>(t[7])},
        .properties = {.storage_size = props[3].is_none()
                                           ? std::nullopt
                                           : std::optional<uint64_t>(nb::cast<uint64_t>(props[3])),
                       .offset = Int(props[2]),
                       .shape = Ints(props[0]),
                       .stride = Ints(props[1])}};
    absl::Status st;
    {
      nb::gil_scoped_release release;
      st = writer.Add(spec);
    }
    if (!st.ok()) RaiseStatus(st);
  }
  absl::Status st;
  {
    nb::gil_scoped_release release;
    st = writer.Write(ptd_path, manifest_path.value_or(""));
  }
  if (!st.ok()) {
    if (st.code() == absl::StatusCode::kInvalidArgument) RaiseStatus(st);
    RaiseOSError(st);
  }
}

// An array (buffer protocol or DLPack producer, on the host) as
// (bytes of its minimal span, ScalarType, sizes, strides in elements).
nb::tuple ArrayStorage(nb::ndarray<nb::ro, nb::device::cpu> a) {
  const int32_t dtype = ScalarTypeOfDl(a.dtype().code, a.dtype().bits);
  if (dtype < 0 || a.dtype().lanes != 1) {
    throw nb::type_error(absl::StrCat("array dtype (DLPack code ", a.dtype().code, ", ",
                                      a.dtype().bits, " bits) has no ExecuTorch ScalarType")
                             .c_str());
  }
  const uint64_t item = a.itemsize();
  std::vector<int64_t> sizes, strides;
  bool empty = false;
  uint64_t last = 0;  // Index of the last element reached.
  for (size_t i = 0; i < a.ndim(); ++i) {
    const int64_t n = static_cast<int64_t>(a.shape(i));
    const int64_t s = a.stride(i);
    if (s < 0) throw nb::value_error("arrays with negative strides cannot be written");
    sizes.push_back(n);
    strides.push_back(s);
    if (n == 0) empty = true;
    if (n > 0) {
      __int128 reach = static_cast<__int128>(n - 1) * s + last;
      if (reach > std::numeric_limits<int64_t>::max()) throw nb::value_error("array too large");
      last = static_cast<uint64_t>(reach);
    }
  }
  const uint64_t nbytes = empty ? 0 : (last + 1) * item;
  nb::bytes storage(static_cast<const char*>(a.data()), nbytes);
  return nb::make_tuple(storage, dtype, sizes, strides);
}

// ---- safetensors: extract and reweight ------------------------------------------

std::string_view DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The diagnostic of a failed Status that names a rule, as ptd-verify --json
// writes one: the file its message starts with ("FILE: ...") when that is
// one of `files`, or a safetensors file or index in one of `folders` (a
// shard), else none.
nlohmann::ordered_json StatusDiagnostic(const absl::Status& s, const std::string& rule,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& folders) {
  std::string message(s.message());
  std::string file;
  const size_t colon = message.find(": ");
  if (colon != std::string::npos && colon > 0) {
    const std::string_view prefix = std::string_view(message).substr(0, colon);
    bool known = false;
    for (const std::string& f : files) known = known || (!f.empty() && prefix == f);
    const bool safetensors =
        EndsWith(prefix, ".safetensors") || EndsWith(prefix, ptd::kSafetensorsIndexSuffix);
    for (const std::string& d : folders) known = known || (safetensors && DirName(prefix) == d);
    if (known) {
      file = std::string(prefix);
      message.erase(0, colon + 2);
    }
  }
  nlohmann::ordered_json d{
      {"rule", rule}, {"message", message}, {"code", absl::StatusCodeToString(s.code())}};
  if (!file.empty()) d["file"] = file;
  return d;
}

// A failed extract or reweight: the report dict of the rule it broke (the
// caller raises ptd.VerifyError; a missing shard is S7), or, for a Status
// that names no rule, the exception of its code: OSError for a file that
// cannot be read or written, ValueError for a bad argument, MemoryError.
nb::object FailedCall(const absl::Status& s, const std::vector<std::string>& files,
                      const std::vector<std::string>& folders) {
  const std::string message(s.message());
  const std::optional<std::string_view> rule = ptd::RuleOfMessage(message);
  // I1: an input that cannot be opened or read is no broken rule of a file.
  if (!rule || *rule == ptd::kInputRule) {
    if (s.code() == absl::StatusCode::kUnavailable) RaiseOSError(s);
    RaiseStatus(s);
  }
  nlohmann::ordered_json j{{"ok", false},
                           {"errors", nlohmann::ordered_json::array()},
                           {"warnings", nlohmann::ordered_json::array()}};
  j["errors"].push_back(StatusDiagnostic(s, std::string(*rule), files, folders));
  return ToPython(j);
}

nlohmann::ordered_json DiagnosticsOf(const std::vector<ptd::Diagnostic>& ds) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ptd::Diagnostic& d : ds) out.push_back(ptd::DiagnosticJson(d));
  return out;
}

std::vector<std::string> Present(std::initializer_list<const std::optional<std::string>*> v) {
  std::vector<std::string> out;
  for (const std::optional<std::string>* p : v) {
    if (p->has_value()) out.push_back(**p);
  }
  return out;
}

// ExtractWeights: {"ok": True, "tensors": [{name, dtype, shape, nbytes,
// file}], "runtime_owned": [fqn], "files": [path], "errors": [],
// "warnings": [...]}; the failure dict of FailedCall when a rule is broken.
nb::object Extract(std::string ptd_path, std::optional<std::string> manifest,
                   std::optional<std::string> pte, std::string out,
                   std::optional<uint64_t> max_shard_size) {
  ptd::ExtractOptions options;
  options.max_shard_size = max_shard_size;
  absl::StatusOr<ptd::ExtractResult> r;
  {
    nb::gil_scoped_release release;
    r = ptd::ExtractWeights(ptd::BundlePaths{.ptd = ptd_path, .manifest = manifest, .pte = pte},
                            out, options);
  }
  if (!r.ok()) {
    std::vector<std::string> files = Present({&manifest, &pte});
    files.push_back(ptd_path);
    files.push_back(out);
    return FailedCall(r.status(), files, {out});
  }
  nlohmann::ordered_json j{{"ok", true}};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const ptd::ExtractedTensor& t : r->tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", t.scalar_type},
                       {"shape", t.shape},
                       {"nbytes", t.nbytes},
                       {"file", t.file}});
  }
  j["tensors"] = std::move(tensors);
  j["runtime_owned"] = r->runtime_owned;
  j["files"] = r->files;
  j["errors"] = DiagnosticsOf(r->report.errors());
  j["warnings"] = DiagnosticsOf(r->report.warnings());
  return ToPython(j);
}

// Reweight: {"ok": True, "written", "kept", "unused": [name], "zero_filled":
// [{key, offset, nbytes}], "zero_filled_bytes", "errors": [], "warnings":
// [...]}; the failure dict of FailedCall when a rule is broken.
nb::object ReweightCall(std::string checkpoint, std::optional<std::string> manifest,
                        std::optional<std::string> pte, std::string out,
                        std::optional<std::string> base,
                        std::vector<std::pair<std::string, std::string>> rename) {
  ptd::ReweightOptions options;
  options.base = base;
  options.rename = std::move(rename);
  absl::StatusOr<ptd::ReweightResult> r;
  {
    nb::gil_scoped_release release;
    r = ptd::Reweight(checkpoint, ptd::BundlePaths{.ptd = "", .manifest = manifest, .pte = pte},
                      out, options);
  }
  if (!r.ok()) {
    std::vector<std::string> files = Present({&manifest, &pte, &base});
    files.push_back(checkpoint);
    files.push_back(out);
    // Shards lie beside their index.
    std::vector<std::string> folders;
    if (checkpoint.size() >= 5 && checkpoint.compare(checkpoint.size() - 5, 5, ".json") == 0) {
      folders.emplace_back(DirName(checkpoint));
    }
    return FailedCall(r.status(), files, folders);
  }
  nlohmann::ordered_json j{{"ok", true}};
  j["written"] = r->written;
  j["kept"] = r->kept;
  j["unused"] = r->unused;
  nlohmann::ordered_json zero = nlohmann::ordered_json::array();
  for (const ptd::ZeroFill& z : r->zero_filled) {
    zero.push_back({{"key", z.key}, {"offset", z.offset}, {"nbytes", z.nbytes}});
  }
  j["zero_filled"] = std::move(zero);
  j["zero_filled_bytes"] = r->zero_filled_bytes;
  j["errors"] = DiagnosticsOf(r->report.errors());
  j["warnings"] = DiagnosticsOf(r->report.warnings());
  return ToPython(j);
}

}  // namespace
}  // namespace ptd_python

NB_MODULE(_ptd, m) {
  using namespace ptd_python;
#ifdef PTD_HAVE_CUDA
  ptd::RegisterCudaDevice();
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  m.doc() = "Native half of the ptd module (see ptd/__init__.py).";

  nb::dict dtypes;
  for (int32_t t = 0; t < ptd::kNumScalarTypes; ++t) dtypes[kDtypes[t].name] = t;
  m.attr("DTYPES") = dtypes;
  m.attr("DEFAULT_DIGEST_LIMIT") = ptd::kDefaultDigestLimit;

  m.def("verify", &Verify, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("sm").none(), nb::arg("digest"), nb::arg("digest_limit"),
        nb::arg("signature").none(), nb::arg("public_key").none(),
        nb::arg("certificate_chain").none(), nb::arg("model_dir").none(),
        "RunVerify over the files: the `ptd-verify --json` object as a dict.");
  m.def("load", &Load, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("device"), nb::arg("fqns").none(), nb::arg("sm").none(), nb::arg("threads").none(),
        nb::arg("map_file"), nb::arg("progress").none(), nb::arg("device_budget").none(),
        nb::arg("host_fqns"), nb::arg("io"), nb::arg("share_segments"), nb::arg("signature").none(),
        nb::arg("public_key").none(), nb::arg("certificate_chain").none(),
        nb::arg("model_dir").none(),
        "Opens, verifies and loads: a _Weights, or the verification dict when a rule is broken.");
  m.def("write", &Write, nb::arg("ptd_path"), nb::arg("manifest_path").none(), nb::arg("specs"),
        nb::arg("format"), nb::arg("variants"), nb::arg("so_blob_key"),
        nb::arg("segment_alignment"), "CudaWeightWriter: Add each spec, then Write.");
  m.def("array_storage", &ArrayStorage, nb::arg("array"),
        "(bytes of the minimal span, ScalarType, sizes, strides) of a host array.");
  m.def("extract", &Extract, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("out"), nb::arg("max_shard_size").none(),
        "ExtractWeights: the result as a dict, or the failure dict of the broken rule.");
  m.def("reweight", &ReweightCall, nb::arg("checkpoint"), nb::arg("manifest").none(),
        nb::arg("pte").none(), nb::arg("out"), nb::arg("base").none(), nb::arg("rename"),
        "Reweight: the result as a dict, or the failure dict of the broken rule.");

  nb::class_<Tensor>(m, "Tensor", "One loaded weight: a strided view over its storage.")
      .def_prop_ro("fqn", &Tensor::fqn)
      .def_prop_ro("dtype", &Tensor::dtype, "torch-style dtype name, e.g. 'bfloat16'")
      .def_prop_ro("scalar_type", &Tensor::scalar_type, "ExecuTorch ScalarType number")
      .def_prop_ro("itemsize", &Tensor::itemsize)
      .def_prop_ro("shape", &Tensor::shape)
      .def_prop_ro("strides", &Tensor::strides, "in elements")
      .def_prop_ro("offset", &Tensor::offset, "storage offset, in elements")
      .def_prop_ro("storage_key", &Tensor::storage_key)
      .def_prop_ro("storage_nbytes", &Tensor::storage_nbytes)
      .def_prop_ro("source", &Tensor::source)
      .def_prop_ro("device", &Tensor::device, "'host' or 'cuda:N'")
      .def_prop_ro("residency", &Tensor::residency,
                   "where the storage lives: 'device' (GPU memory), 'mapped_host' (pinned "
                   "host memory the GPU reads over the bus) or 'host' (plain host memory)")
      .def(
          "view_as",
          [](const Tensor& t, const std::string& dtype) {
            nb::dict d = nb::module_::import_("ptd._ptd").attr("DTYPES");
            if (!d.contains(dtype.c_str()))
              throw nb::value_error(("unknown dtype " + dtype).c_str());
            return t.Reinterpret(nb::cast<int32_t>(d[dtype.c_str()]));
          },
          nb::arg("dtype"),
          "The same view read as another dtype of the same size (e.g. bfloat16 as uint16).")
      .def("__dlpack_device__", &Tensor::dlpack_device)
      .def(
          "__dlpack__",
          [](nb::handle self, nb::kwargs kwargs) {
            const Tensor& t = nb::cast<const Tensor&>(self);
            return t.Array(self).attr("__dlpack__")(**kwargs);
          },
          "A DLPack capsule of the view (zero-copy, read-only); keeps the storage alive.")
      .def("__repr__", [](const Tensor& t) {
        std::string shape;
        nb::tuple s = t.shape();
        for (size_t i = 0; i < s.size(); ++i) {
          absl::StrAppend(&shape, i ? ", " : "", nb::cast<int64_t>(s[i]));
        }
        return absl::StrCat("ptd.Tensor('", t.fqn(), "', ", t.dtype(), ", (", shape, "), ",
                            t.device(), ")");
      });

  nb::class_<Weights>(m, "_Weights")
      .def_prop_ro("by_key", &Weights::by_key)
      .def_prop_ro("names", &Weights::names)
      .def_prop_ro("device", &Weights::device, "'host' or 'cuda:N'")
      .def_prop_ro("device_description", &Weights::device_description,
                   "'host' or e.g. 'cuda:0 (NVIDIA H200, sm_90)'")
      .def("get", &Weights::Get, nb::arg("name"))
      .def_prop_ro("timings", &Weights::timings)
      .def_prop_ro("stats", &Weights::stats)
      .def_prop_ro("placement", &Weights::placement)
      .def_prop_ro("io", &Weights::io)
      .def_prop_ro("signature", &Weights::signature)
      .def_prop_ro("runtime_owned", &Weights::runtime_owned);
}
