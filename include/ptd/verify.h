// The verification session behind ptd-verify: runs every check the library
// has over a .ptd and, optionally, a standalone manifest and/or a .pte, and
// returns what it found as a typed VerifyOutcome. Two renderers read it:
// FormatText (the readable report) and FormatJson (the object of
// docs/SPEC.md section 6), both below.
//
// Example:
//   VerifyOutcome out = RunVerify(
//       VerifyOptions{.paths = {.ptd = "m.ptd", .manifest = "m.manifest"}});
//   std::cout << FormatText(out);
//   if (out.exit_code() == 0) auto weights = LoadWeights(out.bundle, device);
//
// Lifetime: the outcome's keys and weights point into `bundle`, which the
// outcome (and every copy of it) holds. Thread-safety: RunVerify may run
// concurrently; an outcome is immutable after return.
#ifndef PTD_VERIFY_H_
#define PTD_VERIFY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

#include "ptd/model_signature.h"
#include "ptd/report.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_stats.h"

namespace ptd {

inline constexpr uint64_t kDefaultDigestLimit = uint64_t{1} << 30;

struct VerifyOptions {
  // The inputs: the .ptd, and the manifest or the .pte that names its
  // weights. paths.use_mmap true reads through a memory mapping (the same
  // results, fewer copies). A mapped file that another process truncates
  // while it is read raises SIGBUS, which no Status can report; so the
  // default is pread(2), where a file that shrinks is a read error (exit
  // code 2) naming the file. A command-line tool that sets it installs a
  // SIGBUS handler first.
  BundlePaths paths;
  // A signed model (ptd/model_signature.h): when signature.enabled(), the
  // signature, the folder and every file in it are checked too (A1-A7), the
  // files hashed signature_threads at a time (0: one per core). A broken
  // A-rule is an error of the report (exit code 1); VerifyOutcome::signature
  // says what ran.
  SignatureOptions signature;
  size_t signature_threads = 0;
  std::optional<uint32_t> sm;
  bool digest = false;
  uint64_t digest_limit = kDefaultDigestLimit;
  // The health scan (docs/SPEC.md section 7, N1): each weight of a floating
  // dtype gets stats (NaN and Inf counts, finite min and max), computed in
  // the same pass over its elements as its digest, and a weight holding
  // NaN or Inf draws warning N1. Views past digest_limit are skipped (D1).
  bool stats = false;
  // With digest: called after each key's and each weight's digest with the
  // number done and the total (keys plus weights), for a progress bar.
  std::function<void(uint64_t done, uint64_t total)> digest_progress;
  // 0: the outcome lists every key and every weight. N > 0: it lists the
  // first N of the container's segments and keys and of each manifest's
  // weights; the totals stay known (VerifiedContainer::segment_count,
  // key_count, VerifiedManifest::weight_count). For a readable report that
  // prints N rows: the rest is never built. Verification, its errors and
  // warnings, and any digests are the same either way.
  size_t list_limit = 0;
};

// The rule ID of an input that cannot be opened or read (docs/SPEC.md
// section 6): its error carries rule "I1", the Status code and the file.
inline constexpr const char* kInputRule = "I1";

// The rule ID of a load that failed after verification (docs/SPEC.md
// section 6; ptd-load): the device cannot be opened, device memory or a copy
// failed, or a requested weight is in no manifest.
inline constexpr const char* kLoadRule = "I2";

// An input that could not be opened or read (exit code 2), and which one.
struct InputError {
  absl::Status status;
  std::string file;
};

// One key of the container (named data) as verified.
struct VerifiedKey {
  const NamedDataEntry* entry = nullptr;  // In bundle->container().
  // The size of its segment; nullopt when the segment index is bad (C7).
  std::optional<uint64_t> size;
  // Where its segment starts in the file (segment_base_offset plus the
  // segment's offset); nullopt when the segment index is bad.
  std::optional<uint64_t> file_offset;
  // With VerifyOptions::digest: the sha256 of its segment's bytes; nullopt
  // when the segment is out of bounds or could not be read.
  std::optional<std::string> sha256;
};

// The container as verified. `container` is null when the .ptd could not be
// opened or decoded: then nothing below it is known.
struct VerifiedContainer {
  std::string path;
  std::optional<uint64_t> size;          // nullopt: the file could not be opened.
  const Container* container = nullptr;  // In bundle.
  size_t segment_count = 0;              // Every segment; the first listed_segments are listed.
  size_t listed_segments = 0;
  size_t key_count = 0;  // Every key; `keys` holds the listed ones.
  std::vector<VerifiedKey> keys;
};

// One weight of a manifest as verified: the entry, its resolution, and what
// the digest pass found.
struct VerifiedWeight {
  const WeightEntry* entry = nullptr;        // In bundle's manifest.
  const ResolvedWeight* resolved = nullptr;  // Null when none was resolved.
  std::optional<uint64_t> required_nbytes;   // The bytes its view reaches.
  // The key behind it (null when X1 failed, for a malformed or runtime-owned
  // entry, or without a container) and its segment's size (nullopt for a
  // bad segment index, C7).
  const NamedDataEntry* key = nullptr;
  std::optional<uint64_t> segment_size;
  bool runtime_owned = false;  // SPEC section 2: no stored bytes.
  // With VerifyOptions::digest: the sha256 of the view's elements gathered
  // in row-major order; nullopt when it could not be taken (an invalid
  // weight, a runtime-owned one, over the digest limit: D1, a read error).
  std::optional<std::string> sha256;
  // With VerifyOptions::stats, for a floating dtype: its health (N1); when
  // it could not be taken as for sha256.
  std::optional<WeightStats> stats;
  bool stats_dtype = false;  // The dtype is one the health scan covers.
};

// The variant a manifest runs on VerifyOptions::sm.
struct VerifiedSelection {
  uint32_t sm = 0;
  std::optional<VariantChoice> choice;  // nullopt: none fits.
  std::string message;                  // Why none fits.
};

struct VerifiedManifest {
  const SourcedManifest* manifest = nullptr;   // In bundle.
  std::optional<VerifiedSelection> selection;  // With VerifyOptions::sm.
  size_t weight_count = 0;                     // Every weight; `weights` holds the listed ones.
  std::vector<VerifiedWeight> weights;
};

// Where an input given in the wrong place belongs.
enum class InputRole { kPtd, kManifest, kPte };

// A file that looks like another kind of input than where it was given: the
// first error about it carries this hint.
struct InputHint {
  size_t error = 0;  // Index into VerifyOutcome::Errors().
  std::string what;  // "this is a CUDA weight manifest ('ETCUDAFQN0')".
  InputRole belongs = InputRole::kPtd;
};

struct VerifyOutcome {
  // What it was run with (digest_progress left out).
  VerifyOptions options;
  VerifiedContainer ptd;
  std::vector<VerifiedManifest> manifests;
  // The rules' errors and warnings, each with its file.
  Report report;
  // Each input that could not be opened or read (I1), in the order found;
  // the first decides exit code 2. Their errors follow the report's.
  std::vector<InputError> io_errors;
  std::vector<InputHint> hints;
  // The signature check (VerifyOptions::signature); checked false without.
  SignatureReport signature;
  // The bundle that was verified (null when the inputs could not be
  // opened): a caller that goes on to load uses it (LoadWeights(bundle,
  // ...)) instead of opening and verifying the files again.
  std::shared_ptr<const WeightBundle> bundle;

  // The first input error, or null.
  const InputError* io_error() const { return io_errors.empty() ? nullptr : &io_errors.front(); }
  // No rule broken and every input read.
  bool ok() const { return report.ok() && io_errors.empty(); }
  // 0: no errors; 1: some rule broken; 2: an input could not be read.
  int exit_code() const {
    if (!io_errors.empty()) return 2;
    return report.ok() ? 0 : 1;
  }
  // Every error as reported: the rules', then one I1 per input error.
  std::vector<Diagnostic> Errors() const;
};

VerifyOutcome RunVerify(const VerifyOptions& options);

// The same over inputs already opened (options' paths are only reported;
// use_mmap is ignored). For tests that wrap a source (fault injection) and
// for callers with their own FileSource.
VerifyOutcome RunVerify(const VerifyOptions& options, const BundleSources& sources);

// How a renderer names where an input goes: the library speaks of its own
// parameters; a command-line tool passes its flags.
struct InputNames {
  std::string ptd = "as paths.ptd";
  std::string manifest = "as paths.manifest";
  std::string pte = "as paths.pte";
  // How every row is listed (after "; "): a tool names its flag.
  std::string all_rows = "max_rows 0 lists them";
};

struct TextOptions {
  // Rows of the key table and of each weight table; past it, one summary
  // row ("... and N more keys; <names.all_rows>") and the verdict repeated
  // last. 0: every row.
  size_t max_rows = 0;
  InputNames names;
};

// The readable report: verdict, errors first, then warnings, the container,
// and a table of weights per manifest. For an unreadable input, one line:
// "cannot read input: <message> (I1)" (a CLI prefixes its name).
std::string FormatText(const VerifyOutcome& outcome, const TextOptions& text = {});

// The JSON report, exactly what `ptd-verify --json` prints for the same
// outcome (without a tool's names in hints unless `names` gives them): the
// object of docs/SPEC.md section 6, two-space indented, with a newline at
// the end. Bytes that are not UTF-8 (keys and fqns come from the file)
// become U+FFFD.
std::string FormatJson(const VerifyOutcome& outcome, const InputNames& names = {});

}  // namespace ptd

#endif  // PTD_VERIFY_H_
