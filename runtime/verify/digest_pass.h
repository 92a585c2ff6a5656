// The digest pass of a verification: each key's sha256 and each weight's
// sha256 and health (N1) over the gathered view, with D1 for views past
// the digest limit. Runs after the bundle is verified, before rendering.
#ifndef PTD_RUNTIME_VERIFY_DIGEST_PASS_H_
#define PTD_RUNTIME_VERIFY_DIGEST_PASS_H_

#include <optional>

#include "ptd/verify.h"

namespace ptd::internal {

// Fills VerifiedKey::sha256 (with options.digest) and VerifiedWeight::sha256
// and stats (with options.digest or options.stats) for every key and weight
// `out` lists, appending D1 and N1 to out->report. Returns the first read
// failure (the file is the container's): no digest is silently left out.
std::optional<InputError> RunDigestPass(const VerifyOptions& options, const Container* c,
                                        VerifyOutcome* out);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_VERIFY_DIGEST_PASS_H_
