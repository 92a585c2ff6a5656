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
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<absl::Status(const WriteFn&)>& produce);

absl::Status WriteFileAtomically(const std::string& path, absl::Span<const uint8_t> bytes);

// Sink for positional writes into the temporary file: writes `bytes` at
// `offset` (pwrite(2); the appending WriteFn's position does not move). A
// range past the current end extends the file.
using WriteAtFn = std::function<absl::Status(uint64_t offset, absl::Span<const uint8_t>)>;

// As WriteFileAtomically, with positional writes besides appends (a header
// written last), and `check`, when set, called with the temporary file's
// path once it is complete and flushed, before the rename: its error leaves
// no file (the target untouched), as a failed write does.
absl::Status WriteFileAtomicallyAt(
    const std::string& path,
    const std::function<absl::Status(const WriteFn& append, const WriteAtFn& write_at)>& produce,
    const std::function<absl::Status(const std::string& temp_path)>& check = nullptr);

}  // namespace ptd

#endif  // PTD_ATOMIC_FILE_H_
