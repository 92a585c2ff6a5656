// The module's conversions: dtypes, Status codes to Python's exceptions,
// and JSON trees (the reports runtime/ renders) to Python objects.
#include <Python.h>

#include <cerrno>
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
#include "nanobind/stl/optional.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "nlohmann/json.hpp"

#include "ptd/scalar_type.h"
#include "python/src/module.h"

namespace ptd_python {
namespace {

// ScalarType (0..29) -> the name Python users know (torch's spelling) and
// the DLPack type; code kNoDl = no DLPack type.
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

}  // namespace

const DtypeInfo& Dtype(int32_t t) { return kDtypes[t]; }

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

void DefineConvert(nb::module_& m) {
  nb::dict dtypes;
  for (int32_t t = 0; t < ptd::kNumScalarTypes; ++t) dtypes[kDtypes[t].name] = t;
  m.attr("DTYPES") = dtypes;
}

}  // namespace ptd_python
