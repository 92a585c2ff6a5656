// Small local status macros. The Debian abseil (20220623) has no public
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so the project carries these.
// Private to the libraries (runtime/): not installed, not part of the interface.
#ifndef PTD_INTERNAL_STATUS_MACROS_H_
#define PTD_INTERNAL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PTD_STATUS_CONCAT_INNER_(a, b) a##b
#define PTD_STATUS_CONCAT_(a, b) PTD_STATUS_CONCAT_INNER_(a, b)

// Returns `expr` from the enclosing function if it is not OK.
#define PTD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status ptd_status_ = (expr);       \
    if (!ptd_status_.ok()) return ptd_status_; \
  } while (false)

// PTD_ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; on error returns
// its status, else move-assigns the value to `lhs` (which may be a
// declaration: `PTD_ASSIGN_OR_RETURN(auto x, F());`).
#define PTD_ASSIGN_OR_RETURN(lhs, expr) \
  PTD_ASSIGN_OR_RETURN_IMPL_(PTD_STATUS_CONCAT_(ptd_statusor_, __LINE__), lhs, expr)

#define PTD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()

#endif  // PTD_INTERNAL_STATUS_MACROS_H_
