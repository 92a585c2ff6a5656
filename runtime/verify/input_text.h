// How a verification words its inputs' trouble, private to runtime/verify/:
// the I1 diagnostic of an input that could not be read (VerifyOutcome::Errors
// and the JSON report) and the text of a hint for a file given in the wrong
// place (both renderers). Defined in verify.cc.
//
// Thread-safety: pure functions of their arguments.
#ifndef PTD_RUNTIME_VERIFY_INPUT_TEXT_H_
#define PTD_RUNTIME_VERIFY_INPUT_TEXT_H_

#include <string>

#include "ptd/report.h"
#include "ptd/verify.h"

namespace ptd {

// The I1 diagnostic of an input error: rule "I1", its code, its message
// ending " (I1)", its file.
Diagnostic InputDiagnostic(const InputError& e);

// "this is ...: pass it with --manifest": a hint in `names`' words.
std::string HintText(const InputHint& hint, const InputNames& names = {});

}  // namespace ptd

#endif  // PTD_RUNTIME_VERIFY_INPUT_TEXT_H_
