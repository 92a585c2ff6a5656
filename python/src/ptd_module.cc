// _ptd: the native half of the Python module `ptd` (python/ptd/__init__.py
// is the public surface). A thin binding: it converts types, releases the
// GIL around verification, loading, writing, extracting and re-weighting,
// and maps absl::Status codes to Python's exceptions. Every rule, message
// and byte decision stays in runtime/ (RunVerify's outcome, rendered by
// VerifyJson, is the object `ptd-verify --json` prints). Its parts:
// python/src/module.h.
#include "nanobind/nanobind.h"

#include "python/src/module.h"
#ifdef PTD_HAVE_CUDA
#include "ptd/open_device.h"
#endif

NB_MODULE(_ptd, m) {
  using namespace ptd_python;
#ifdef PTD_HAVE_CUDA
  ptd::RegisterCudaDevice();
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  m.doc() = "Native half of the ptd module (see ptd/__init__.py).";
  DefineConvert(m);
  DefineVerify(m);
  DefineLoad(m);
  DefineWrite(m);
  DefineCheckpoint(m);
  DefineWeights(m);
}
