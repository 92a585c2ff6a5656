// Tensor and _Weights: a load's result as Python objects. A Tensor holds the
// LoadedWeights, so its storage lives as long as it does (and any DLPack
// capsule, which holds the Tensor).
#include <Python.h>

#include <cstdint>
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

#include "ptd/device.h"
#include "ptd/loader.h"
#include "ptd/scalar_type.h"
#include "python/src/module.h"
#include "runtime/loader/io_report_json.h"
#include "runtime/loader/load_report_json.h"
#include "runtime/signing/signature_report_json.h"

namespace ptd_python {
namespace {

using ptd::LoadedWeight;
using ptd::LoadedWeights;

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
    const DtypeInfo& info = Dtype(dtype_);
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
  Weights(std::shared_ptr<const LoadedWeights> w, bool by_key, ptd::internal::LoadFacts facts)
      : w_(std::move(w)),
        by_key_(by_key),
        facts_(std::move(facts)),
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

  // The load's parts as `ptd-load --json` prints them (one renderer:
  // runtime/loader/load_report_json.h): its "timings", its "load" (the
  // counts, "placement", "device_budget", "io") and "placement".
  nb::object timings() const {
    return ToPython(ptd::internal::LoadTimingsJson(w_->timings(), w_->stats().bytes));
  }
  nb::object stats() const { return ToPython(ptd::internal::LoadStatsJson(w_->stats(), facts_)); }
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
  nb::object placement() const { return ToPython(ptd::internal::PlacementJson(w_->stats())); }
  // Runtime-owned entries (the off-graph KV cache): not loaded; what a
  // runtime needs to allocate them, as `ptd-load --json`'s "runtime_owned"
  // (python/ptd/__init__.py names the fields as Tensor does).
  nb::object runtime_owned() const { return ToPython(ptd::internal::RuntimeOwnedJson(*w_)); }

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
  ptd::internal::LoadFacts facts_;  // What LoadStatsJson adds to the stats.
  std::string device_;
  std::string device_description_;
  std::vector<std::string> names_;
};

}  // namespace

nb::object MakeWeights(std::shared_ptr<const LoadedWeights> w, bool by_key,
                       ptd::internal::LoadFacts facts) {
  return nb::cast(Weights(std::move(w), by_key, std::move(facts)));
}

void DefineWeights(nb::module_& m) {
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

}  // namespace ptd_python
