// Strict UTF-8 validation (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
#ifndef PTD_INTERNAL_UTF8_H_
#define PTD_INTERNAL_UTF8_H_

#include <string_view>

namespace ptd::internal {

bool IsValidUtf8(std::string_view s);

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_UTF8_H_
