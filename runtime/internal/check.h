// PTD_CHECK: aborts on a programmer bug or a broken environment (never on
// file contents). The Debian abseil has no absl/log, hence this macro.
#ifndef PTD_INTERNAL_CHECK_H_
#define PTD_INTERNAL_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define PTD_CHECK(cond)                                                             \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (false)

#endif  // PTD_INTERNAL_CHECK_H_
