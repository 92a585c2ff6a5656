// String helpers bridging std::string_view and abseil.
//
// Debian's abseil is built with ABSL_OPTION_USE_STD_STRING_VIEW=0, so
// absl::string_view is its own type and absl::StrCat does not take a
// std::string_view; Sv() converts at those call sites. Plural() words a
// count the same way in the library's report and the tools' lines.
#ifndef PTD_INTERNAL_STRINGS_H_
#define PTD_INTERNAL_STRINGS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ptd::internal {

inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// `s` with non-printable bytes C-hex-escaped, for messages about bad bytes.
inline std::string Escaped(std::string_view s) { return absl::CHexEscape(Sv(s)); }

// "1 warning", "2 warnings": `n` and the word for it.
inline std::string Plural(uint64_t n, std::string_view one, std::string_view many) {
  return absl::StrCat(n, " ", Sv(n == 1 ? one : many));
}

}  // namespace ptd::internal

#endif  // PTD_INTERNAL_STRINGS_H_
