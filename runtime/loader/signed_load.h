// A signed load's checks around the transfer stage (LoadOptions::signature):
// before it, the signature (A1-A3, A7), the folder (A4, A6) and every file
// of it but the .ptd (A5); during it, the .ptd's digests on the load's own
// reads (SignedFileHasher, attached to the read engine); after it, the
// .ptd's digests (A5). Private to ptd::loader.
#ifndef PTD_RUNTIME_LOADER_SIGNED_LOAD_H_
#define PTD_RUNTIME_LOADER_SIGNED_LOAD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/byte_source.h"
#include "ptd/loader.h"
#include "ptd/model_signature.h"

namespace ptd::internal {

struct SignedLoad {
  std::unique_ptr<ModelSignature> signature;
  const SignedFile* entry = nullptr;  // The .ptd's.
  const FileSource* file = nullptr;   // The .ptd the load reads.
  SignatureReport* report = nullptr;
};

// Runs the checks before the transfer for a load of `source` (whose
// LocatedFile is the .ptd) that also read `other_paths` (a .pte, a
// manifest). Null when `options` is not enabled; `threads` hash the folder's other files.
absl::StatusOr<std::unique_ptr<SignedLoad>> BeginSignedLoad(
    const SignatureOptions& options, size_t threads, const ByteSource& source,
    absl::Span<const std::string> other_paths, SignatureReport* report);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_SIGNED_LOAD_H_
