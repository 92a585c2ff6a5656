// Strict UTF-8 validation (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), and the printable form of bytes that may not be
// UTF-8.
#ifndef PTD_INTERNAL_UTF8_H_
#define PTD_INTERNAL_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace ptd::internal {

bool IsValidUtf8(std::string_view s);

// `s` as the JSON output shows it, for text reports: each byte that does not
// start a valid UTF-8 sequence becomes U+FFFD, and each ASCII control
// character becomes \u00XX, so a hostile key cannot break a line or a table.
std::string PrintableUtf8(std::string_view s);

// The number of code points of valid UTF-8 `s` (its width in a table, for
// the scripts a report prints).
size_t CodePointCount(std::string_view s);

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_UTF8_H_
