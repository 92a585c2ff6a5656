// What ptd-verify and ptd-load share at the command-line boundary: stdout
// written and checked (a full disk is exit 2, never a silent success), a
// last-resort "out of memory", CLI11 set up with value placeholders and
// near-flag suggestions, and byte counts parsed strictly.
#ifndef PTD_VERIFIER_CLI_UTIL_H_
#define PTD_VERIFIER_CLI_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"

namespace ptd::cli {

// Runs `body` and returns its exit code, or 2 after one line on stderr when
// it ran out of memory (std::bad_alloc, std::length_error) or when stdout
// could not be written ("write error: No space left on device").
int RunGuarded(const char* program, const std::function<int()>& body);

// Writes `text` to stdout and flushes it. On failure remembers the first
// error (RunGuarded reports it) and returns false.
bool WriteOut(std::string_view text);

// Sets the failure message: CLI11's error, a "did you mean --X?" for an
// unknown flag close to a known one, and "Run with --help".
void SetUp(CLI::App& app);

// Parses `--digest-limit`-style values: a decimal integer in [0, 2^64).
// Rejects signs, spaces and values past 2^64 - 1.
bool ParseByteCount(const std::string& text, uint64_t* out);

// The nearest option name (e.g. "--manifest") within edit distance 2 of
// `arg`, or "" when none is that close.
std::string NearestOption(const CLI::App& app, const std::string& arg);

// "1 warning", "2 warnings".
std::string Plural(uint64_t n, std::string_view one, std::string_view many);

}  // namespace ptd::cli

#endif  // PTD_VERIFIER_CLI_UTIL_H_
