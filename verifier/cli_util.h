// What ptd-verify and ptd-load share at the command-line boundary: stdout
// written and checked (a full disk is exit 2, never a silent success), a
// last-resort "out of memory", CLI11 set up with value placeholders and
// near-flag suggestions, and byte counts parsed strictly.
#ifndef PTD_VERIFIER_CLI_UTIL_H_
#define PTD_VERIFIER_CLI_UTIL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "CLI/CLI.hpp"

#include "ptd/model_signature.h"
#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"

// 1 in a build with AddressSanitizer, ThreadSanitizer or MemorySanitizer
// (GCC's and clang's ways of saying so), else 0.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PTD_CLI_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define PTD_CLI_SANITIZER 1
#endif
#endif
#ifndef PTD_CLI_SANITIZER
#define PTD_CLI_SANITIZER 0
#endif

namespace ptd::cli {

// Runs `body` and returns its exit code, or 2 after one line on stderr when
// it ran out of memory (std::bad_alloc, std::length_error) or when stdout
// could not be written ("write error: No space left on device").
int RunGuarded(const char* program, const std::function<int()>& body);

// Called first in main(): from then on, blocks of kLargeBlockBytes or more
// that operator new hands out are mappings of their own on transparent huge
// pages (huge_page_new.cc; glibc's glibc.malloc.hugetlb=1 does this for the
// blocks it maps, but only when set before the process starts): a run over
// 100,000 weights touches tens of megabytes of fresh metadata, and one 2 MiB
// fault replaces 512 of 4 KiB (figures: bench/results/notes.md). Does nothing
// when the kernel's THP mode is "never", when GLIBC_TUNABLES sets
// glibc.malloc.hugetlb (glibc applies the user's setting), when
// PTD_MALLOC_HUGETLB=0, or in a sanitizer build (its allocator's operator new
// stays).
void UseHugePageMalloc();

// The size from which operator new maps a block on huge pages once
// UseHugePagesForLargeBlocks() ran: one transparent huge page, and malloc's
// mmap threshold (kMallocMmapThreshold), so that a large block is a mapping
// of its own either way.
inline constexpr size_t kLargeBlockBytes = size_t{2} << 20;

// Turns that on (huge_page_new.cc); false in a sanitizer build, where it
// stays off. UseHugePageMalloc() calls it when the conditions hold.
bool UseHugePagesForLargeBlocks();
// Whether it is on.
bool HugePagesForLargeBlocks();

// True when this code was built with AddressSanitizer, ThreadSanitizer or
// MemorySanitizer (GCC's and clang's ways of saying so): their allocators
// ignore glibc's tunables, and their shadow memory reserves terabytes of
// address space.
bool BuiltWithSanitizer();

// True when UseHugePageMalloc can take effect here: a kernel THP mode other
// than "never", no sanitizer.
bool HugePageMallocAvailable();

// Called in main() after UseHugePageMalloc: fixes glibc malloc's
// mmap threshold at kMallocMmapThreshold (2 MiB, one transparent huge page)
// with mallopt. Left alone, glibc raises the threshold to the size of each
// large block freed (up to 32 MiB), so the verification's and the load
// plan's tables of 100,000 entries, once freed, stay in the heap as holes
// that the next tables do not fit. Fixed, blocks of 2 MiB and more get
// mappings of their own (on huge pages with UseHugePageMalloc) that go
// back to the system when freed; smaller ones reuse the heap (peak RSS
// figures: bench/results/notes.md). Does nothing when GLIBC_TUNABLES sets
// glibc.malloc.mmap_threshold or MALLOC_MMAP_THRESHOLD_ is set (the user's
// choice is kept), or where mallopt refuses (a sanitizer's allocator).
inline constexpr int kMallocMmapThreshold = 2 << 20;
void FixMallocMmapThreshold();

// The mmap threshold in effect, for --version: "malloc: mmap_threshold=
// 2097152 (fixed)", "malloc: mmap_threshold set by the environment" or
// "malloc: mmap_threshold dynamic (glibc's default)".
std::string MallocMmapLine();

// The malloc page setting this process runs with, for --version:
// "malloc: blocks of 2 MiB and more on transparent huge pages
// (MADV_HUGEPAGE)", the user's "malloc: glibc.malloc.hugetlb=N" (with
// " (large blocks on transparent huge pages)" for 1) or "malloc: default
// (4 KiB) pages".
std::string MallocPagesLine();

// Rows of each table in a readable report unless --all is given; the
// verification builds no more than it prints (VerifyOptions::list_limit).
inline constexpr size_t kReportRows = 50;

// How the tools name where an input goes (hints: "pass it with
// --manifest") and how every row is listed ("--all lists them").
InputNames ToolInputNames();

// Prints a verify outcome as the tools do. With `json` (the object to print:
// VerifyJson of `outcome`, which ptd-load extends), that object on stdout,
// and an unreadable input said once more on stderr; without, the readable
// report on stdout, or for an unreadable input one line on stderr
// ("PROGRAM: cannot read input: ... (I1)"). Returns outcome.exit_code().
int PrintVerifyOutcome(const char* program, const VerifyOutcome& outcome,
                       const nlohmann::ordered_json* json, bool all_rows);

// Makes SIGBUS (a mapped file that shrank under a read) end the process
// with exit code 2 and one line on stderr, "PROGRAM: a mapped input file
// shrank ...: <what> ...", instead of a crash. Process-wide; for a tool that
// reads through a mapping (ptd-verify --mmap). The handler only writes and
// exits (async-signal-safe); `what` (the files read) is copied, up to 1 KiB.
void ExitOnMappedFileFault(const char* program, const std::string& what);

// Moves `value` to the heap and never frees it: a report of 100,000 weights
// takes about as long to take apart node by node as to build, and the tool
// is about to exit. A global holds the pointer, so leak checkers see it as
// reachable. For the one outcome of a command-line run, not for loops.
void RememberUntilExit(const void* p);
template <typename T>
T& KeepUntilExit(T value) {
  T* kept = new T(std::move(value));
  RememberUntilExit(kept);
  return *kept;
}

// Writes `text` to stdout and flushes it. On failure remembers the first
// error (RunGuarded reports it) and returns false.
bool WriteOut(std::string_view text);

// Sets the failure message (CLI11's error, a "did you mean --X?" for an
// unknown flag close to a known one, and "Run with --help") and the
// --version flag: "NAME VERSION", NAME the app's name; with `malloc_lines`
// (the tools that set malloc up in main()), MallocPagesLine() and
// MallocMmapLine() below it.
void SetUp(CLI::App& app, const std::string& version, bool malloc_lines = false);

// The help of --manifest, for every tool that reads one: the formats a
// standalone manifest may have ("a standalone ETCUDAFQN0 or ETCUDAFQN3
// manifest").
std::string ManifestFlagHelp();

// --signature, --public-key, --certificate-chain and --model-dir into
// `options` (a signed model: ptd/model_signature.h). Call CheckSignatureFlags
// after parsing: a usage error (exit code 2) when a key or chain is missing,
// or given without --signature.
void AddSignatureFlags(CLI::App& app, SignatureOptions* options);
std::optional<std::string> CheckSignatureFlags(const SignatureOptions& options);

// Parses the command line into `app`'s options: nullopt to go on, else the
// exit code after help or version on stdout (checked, like every write), 0,
// or the usage error on stderr, 2.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// Parses `--digest-limit`-style values: a decimal integer in [0, 2^64).
// Rejects signs, spaces and values past 2^64 - 1.
bool ParseByteCount(const std::string& text, uint64_t* out);

// Parses `--device-budget`-style sizes: a decimal integer with an optional
// binary suffix K, M, G or T (either case; 1K = 1024), "48M" or "1073741824".
// Rejects signs, spaces, fractions, other suffixes and values past 2^64 - 1.
bool ParseByteSize(const std::string& text, uint64_t* out);

// A progress bar on stderr (the caller checks that it is a terminal): one
// line that fits the terminal, with the phase, the amount done, the rate and
// the ETA; shown once a phase has taken half a second; erased when the phase
// ends (Update with done == total, or Erase). Not thread-safe: the caller
// serializes Update calls.
class ProgressBar {
 public:
  enum Unit { kBytes, kItems };
  void Start(std::string phase, Unit unit = kBytes);
  // Always true (the loader's callback: continue).
  bool Update(uint64_t done, uint64_t total);
  void Erase();
  // The line for `done` of `total` after `seconds`, at most `columns - 1`
  // characters wide.
  std::string Line(uint64_t done, uint64_t total, double seconds, int columns) const;

 private:
  std::string phase_ = "loading";
  Unit unit_ = kBytes;
  int delay_ms_ = 500;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  bool shown_ = false;
};

}  // namespace ptd::cli

#endif  // PTD_VERIFIER_CLI_UTIL_H_
