#include "runtime/internal/utf8.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ptd::internal {
namespace {

// Length of the valid UTF-8 sequence at `p` (1..4), or 0 when the bytes at
// `p` do not start one. REQUIRES: p < end.
int SequenceLength(const uint8_t* p, const uint8_t* end) {
  const uint8_t c = *p;
  if (c < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // Overlong.
    if (c == 0xED) hi = 0x9F;  // Surrogates.
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // Overlong.
    if (c == 0xF4) hi = 0x8F;  // Above U+10FFFF.
  } else {
    return 0;
  }
  if (end - p < len) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
  }
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    // Keys and fqns are nearly always ASCII: eight bytes at a time, and a
    // tail shorter than eight as the last eight bytes of the string (what
    // they share with checked bytes was valid already).
    if (end - p >= 8 || s.size() >= 8) {
      const uint8_t* word_at = end - p >= 8 ? p : end - 8;
      uint64_t word;
      std::memcpy(&word, word_at, sizeof(word));
      if ((word & 0x8080808080808080u) == 0) {
        p = word_at + 8;
        continue;
      }
    }
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const int len = SequenceLength(p, end);
    if (len == 0) return false;
    p += len;
  }
  return true;
}

std::string PrintableUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto* end = p + s.size();
  std::string out;
  out.reserve(s.size());
  while (p < end) {
    const int len = SequenceLength(p, end);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER.
      ++p;
    } else if (len == 1 && (*p < 0x20 || *p == 0x7F)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", *p);
      out += buf;
      ++p;
    } else {
      out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
      p += len;
    }
  }
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (const char c : s) {
    if ((static_cast<uint8_t>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace ptd::internal
