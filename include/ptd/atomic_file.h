// WriteFileAtomically: the library's only way to write a file.
//
// Writes to a temporary file in the target's directory, fsyncs it, renames it
// over the target and fsyncs the directory. On any failure the temporary is
// removed and an existing target is left untouched.
#ifndef PTD_ATOMIC_FILE_H_
#define PTD_ATOMIC_FILE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ptd {

// Sink handed to the producer: appends bytes to the temporary file.
using WriteFn = std::function<absl::Status(absl::Span<const uint8_t>)>;

// Calls `produce(write)`; the target appears only if `produce` and every
// write succeed. `produce` may stream any number of chunks.
absl::Status WriteFileAtomically(
    const std::string& path,
    const std::function<absl::Status(const WriteFn&)>& produce);

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const uint8_t> bytes);

}  // namespace ptd

#endif  // PTD_ATOMIC_FILE_H_
