// write(): CudaWeightWriter over Python buffers; array_storage(): the
// bytes and geometry of a host array.
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

#include "ptd/manifest.h"
#include "ptd/scalar_type.h"
#include "ptd/weight_writer.h"
#include "python/src/module.h"

namespace ptd_python {
namespace {

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

}  // namespace

void DefineWrite(nb::module_& m) {
  m.def("write", &Write, nb::arg("ptd_path"), nb::arg("manifest_path").none(), nb::arg("specs"),
        nb::arg("format"), nb::arg("variants"), nb::arg("so_blob_key"),
        nb::arg("segment_alignment"), "CudaWeightWriter: Add each spec, then Write.");
  m.def("array_storage", &ArrayStorage, nb::arg("array"),
        "(bytes of the minimal span, ScalarType, sizes, strides) of a host array.");
}

}  // namespace ptd_python
