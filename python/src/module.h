// The native module's parts (python/src/), one job per file:
//   convert.cc     dtypes, Status -> Python exceptions, JSON -> Python objects
//   verify.cc      verify(), and the report and signature arguments load() shares
//   weights.cc     Tensor and _Weights: loaded weights as Python objects
//   load.cc        load(): the one orchestration ptd-load also runs
//                  (runtime/loader/load_session.h)
//   write.cc       write() and array_storage()
//   checkpoint.cc  extract() and reweight()
// ptd_module.cc registers them (the Define functions). Every rule, message
// and byte decision stays in runtime/.
#ifndef PTD_PYTHON_SRC_MODULE_H_
#define PTD_PYTHON_SRC_MODULE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "nanobind/nanobind.h"
#include "nlohmann/json.hpp"

#include "ptd/loader.h"
#include "ptd/model_signature.h"
#include "ptd/verify.h"
#include "runtime/loader/load_report_json.h"

namespace ptd_python {

namespace nb = nanobind;

// ---- convert.cc

// A ScalarType's name as Python users know it (torch's spelling) and its
// DLPack type; dl_code kNoDl = none.
struct DtypeInfo {
  const char* name;
  uint8_t dl_code;
  uint8_t dl_bits;
};
inline constexpr uint8_t kNoDl = 255;
// `t` in [0, ptd::kNumScalarTypes).
const DtypeInfo& Dtype(int32_t t);
// "unknown" outside the range.
const char* DtypeName(int32_t t);
// The ScalarType of a DLPack type, or -1.
int32_t ScalarTypeOfDl(uint8_t code, uint8_t bits);

// OSError(errno, message): Python makes it FileNotFoundError for a missing
// file, PermissionError for EACCES.
[[noreturn]] void RaiseOSError(const absl::Status& s);
// The exception of a Status' code (ValueError, MemoryError, OSError, ...).
[[noreturn]] void RaiseStatus(const absl::Status& s);

// JSON -> Python objects; strings from a file need not be UTF-8 (invalid
// bytes become U+FFFD, as in `ptd-verify --json`).
nb::object Str(const std::string& s);
nb::object ToPython(const nlohmann::ordered_json& j);

// ---- verify.cc

// OSError for a file that could not be opened or read.
void RaiseIfUnreadable(const ptd::VerifyOutcome& outcome);
// The report as `ptd-verify --json` prints it, with hints in Python's words.
nb::object ReportDict(const ptd::VerifyOutcome& outcome);
// The signature arguments of verify() and load(); ValueError for a key or
// chain without a signature, or neither with one.
ptd::SignatureOptions SignatureArgs(std::optional<std::string> signature,
                                    std::optional<std::string> public_key,
                                    std::optional<std::string> certificate_chain,
                                    std::optional<std::string> model_dir);

// ---- weights.cc

// A _Weights over a load's result (`by_key`: a .ptd without manifests, its
// items named by key); `facts` completes its stats.
nb::object MakeWeights(std::shared_ptr<const ptd::LoadedWeights> w, bool by_key,
                       ptd::internal::LoadFacts facts);

// ---- registration, one per file
void DefineConvert(nb::module_& m);
void DefineVerify(nb::module_& m);
void DefineWeights(nb::module_& m);
void DefineLoad(nb::module_& m);
void DefineWrite(nb::module_& m);
void DefineCheckpoint(nb::module_& m);

}  // namespace ptd_python

#endif  // PTD_PYTHON_SRC_MODULE_H_
