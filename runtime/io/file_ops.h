// FileOps: the file operations WriteFileAtomically performs, as a seam for
// fault-injection tests (LevelDB's Env, in small).
//
// Production code never sees it: the public WriteFileAtomically
// (include/ptd/atomic_file.h) passes DefaultFileOps(), whose methods call
// the system calls directly; one virtual call per system call is the cost.
// Tests subclass FileOps, fail a chosen step with a chosen errno, and check
// that the target is untouched and no temporary is left behind:
//
//   class NoSpaceOnFsync : public internal::FileOps {
//     int Fsync(int fd) const override { errno = ENOSPC; return -1; }
//   };
//   internal::WriteFileAtomically(NoSpaceOnFsync(), path, produce);
//
// Each method has its system call's contract (return value, errno).
// Thread-safety: DefaultFileOps() is stateless; a test's ops are its own.
#ifndef PTD_RUNTIME_IO_FILE_OPS_H_
#define PTD_RUNTIME_IO_FILE_OPS_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"

#include "ptd/atomic_file.h"

namespace ptd::internal {

class FileOps {
 public:
  virtual ~FileOps() = default;
  virtual int Open(const char* path, int flags, mode_t mode) const;
  virtual ssize_t Write(int fd, const void* buf, size_t n) const;
  virtual int Fsync(int fd) const;
  virtual int Close(int fd) const;
  virtual int Rename(const char* from, const char* to) const;
  virtual int Unlink(const char* path) const;
};

// The system calls themselves.
const FileOps& DefaultFileOps();

// WriteFileAtomically (include/ptd/atomic_file.h) through `ops`.
absl::Status WriteFileAtomically(const FileOps& ops, const std::string& path,
                                 const std::function<absl::Status(const WriteFn&)>& produce);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_IO_FILE_OPS_H_
