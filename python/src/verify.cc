// verify(): RunVerify over the files, returned as the dict `ptd-verify
// --json` prints; and what load() shares with it.
#include "ptd/verify.h"

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
#include "nanobind/stl/optional.h"
#include "nanobind/stl/pair.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"
#include "nlohmann/json.hpp"

#include "ptd/model_signature.h"
#include "python/src/module.h"
#include "runtime/verify/verify_json.h"

namespace ptd_python {

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

namespace {

nb::object Verify(std::string ptd_path, std::optional<std::string> manifest,
                  std::optional<std::string> pte, std::optional<uint32_t> sm, bool digest,
                  uint64_t digest_limit, std::optional<std::string> signature,
                  std::optional<std::string> public_key,
                  std::optional<std::string> certificate_chain,
                  std::optional<std::string> model_dir) {
  ptd::VerifyOptions options;
  options.signature = SignatureArgs(signature, public_key, certificate_chain, model_dir);
  options.paths.ptd = ptd_path;
  options.paths.manifest = manifest;
  options.paths.pte = pte;
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

}  // namespace

void DefineVerify(nb::module_& m) {
  m.attr("DEFAULT_DIGEST_LIMIT") = ptd::kDefaultDigestLimit;
  m.def("verify", &Verify, nb::arg("ptd"), nb::arg("manifest").none(), nb::arg("pte").none(),
        nb::arg("sm").none(), nb::arg("digest"), nb::arg("digest_limit"),
        nb::arg("signature").none(), nb::arg("public_key").none(),
        nb::arg("certificate_chain").none(), nb::arg("model_dir").none(),
        "RunVerify over the files: the `ptd-verify --json` object as a dict.");
}

}  // namespace ptd_python
