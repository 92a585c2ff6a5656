// Strict UTF-8 (RFC 3629) and the printable form the readable report uses.
#include "runtime/internal/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace ptd::internal {
namespace {

TEST(Utf8Test, AcceptsValidSequences) {
  for (const std::string& s : {std::string(), std::string("ascii"),
                               std::string("\xC3\xA9"),          // é
                               std::string("\xE2\x82\xAC"),      // €
                               std::string("\xF0\x9F\x98\x80"),  // U+1F600
                               std::string("\xF4\x8F\xBF\xBF"),  // U+10FFFF
                               std::string("a\0b", 3)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
  }
}

TEST(Utf8Test, RejectsInvalidSequences) {
  for (const std::string& s : {std::string("\x80"),              // Lone continuation.
                               std::string("\xC0\xAF"),          // Overlong.
                               std::string("\xE0\x80\xAF"),      // Overlong.
                               std::string("\xED\xA0\x80"),      // Surrogate.
                               std::string("\xF4\x90\x80\x80"),  // Above U+10FFFF.
                               std::string("\xF5\x80\x80\x80"),
                               std::string("\xC3"),  // Truncated.
                               std::string("\xE2\x82"), std::string("ok\xFF")}) {
    EXPECT_FALSE(IsValidUtf8(s)) << s.size();
  }
}

// The ASCII fast path reads eight bytes at a time: a sequence, good or bad,
// at every offset of a long string is judged as it is alone.
TEST(Utf8Test, SequencesAnywhereInLongAsciiStrings) {
  const std::string good[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
  const std::string bad[] = {"\x80", "\xFF", "\xC0\xAF", "\xED\xA0\x80"};
  for (size_t at = 0; at <= 24; ++at) {
    const std::string before(at, 'a'), after(24 - at, 'b');
    for (const std::string& g : good) {
      EXPECT_TRUE(IsValidUtf8(before + g + after)) << at;
      // Cut short at the string's end.
      EXPECT_FALSE(IsValidUtf8(before + g.substr(0, g.size() - 1))) << at;
    }
    for (const std::string& b : bad) EXPECT_FALSE(IsValidUtf8(before + b + after)) << at;
  }
  EXPECT_TRUE(IsValidUtf8(std::string(1000, 'x')));
}

TEST(Utf8Test, PrintableReplacesBadBytesAndEscapesControls) {
  EXPECT_EQ(PrintableUtf8("plain.key"), "plain.key");
  EXPECT_EQ(PrintableUtf8("\xC3\xA9t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(PrintableUtf8("a\xFF"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(PrintableUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // Per byte.
  EXPECT_EQ(PrintableUtf8("line\nbreak\ttab"), "line\\u000abreak\\u0009tab");
  EXPECT_EQ(PrintableUtf8(std::string("nul\0", 4)), "nul\\u0000");
  // The result is always valid UTF-8.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  EXPECT_TRUE(IsValidUtf8(PrintableUtf8(all)));
}

TEST(Utf8Test, CodePointCount) {
  EXPECT_EQ(CodePointCount(""), 0u);
  EXPECT_EQ(CodePointCount("abc"), 3u);
  EXPECT_EQ(CodePointCount("\xC3\xA9t\xC3\xA9"), 3u);
  EXPECT_EQ(CodePointCount("\xEF\xBF\xBD"), 1u);
}

}  // namespace
}  // namespace ptd::internal
