#include "runtime/verify/digest_pass.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#include "ptd/sha256.h"
#include "ptd/view_digest.h"
#include "ptd/weight_stats.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/strings.h"

namespace ptd::internal {
namespace {

// Digest progress: items (keys and weights) done out of the total.
struct Progress {
  const VerifyOptions* options = nullptr;
  uint64_t done = 0, total = 0;
  void Tick() {
    if (options->digest && options->digest_progress) options->digest_progress(++done, total);
  }
};

// Keeps the first read failure.
void NoteReadFailure(const absl::Status& s, const Container& c,
                     std::optional<InputError>* failure) {
  if (!s.ok() && !failure->has_value()) *failure = InputError{s, c.path()};
}

void DigestKey(const Container& c, VerifiedKey* k, std::optional<InputError>* failure) {
  const NamedDataEntry& e = *k->entry;
  if (!k->size || !c.segments()[e.segment_index].in_bounds) return;
  auto d = DigestRange(c.source(), c.SegmentFileOffset(e.segment_index), *k->size);
  if (d.ok()) {
    k->sha256 = *std::move(d);
  } else {
    NoteReadFailure(d.status(), c, failure);
  }
}

// D1: a view that gathers more than the digest limit gets neither.
bool OverDigestLimit(const VerifiedWeight& v, const VerifyOptions& options, bool stats,
                     const Where& where, Report* report) {
  const WeightEntry& e = *v.entry;
  const auto gathered =
      internal::CheckedMul(v.resolved->extent->numel, v.resolved->view().element_size);
  if (gathered && *gathered <= options.digest_limit) return false;
  report->Warning("D1",
                  absl::StrCat("weight '", internal::Sv(e.fqn), "': the view gathers ",
                               gathered ? absl::StrCat(*gathered) : "over 2^64",
                               " bytes, over the digest limit of ", options.digest_limit,
                               options.digest && stats ? "; no sha256 and no stats"
                               : options.digest        ? "; no sha256"
                                                       : "; no stats"),
                  where);
  return true;
}

// One pass over the view's elements feeds both the digest and the health
// scan (N1).
void DigestWeight(const Container& c, const std::string& source, const VerifyOptions& options,
                  VerifiedWeight* v, Report* report, std::optional<InputError>* failure) {
  const ResolvedWeight* w = v->resolved;
  const bool stats = options.stats && v->stats_dtype;
  if ((!options.digest && !stats) || w == nullptr || !w->ok || w->runtime_owned ||
      w->named == nullptr) {
    return;
  }
  const WeightEntry& e = *v->entry;
  const Where where{.file = c.path(),
                    .key = std::string(e.storage_key),
                    .fqn = std::string(e.fqn),
                    .source = source};
  if (OverDigestLimit(*v, options, stats, where, report)) return;
  const uint32_t seg = w->named->segment_index;
  Sha256 hash;
  std::optional<WeightStatsAccumulator> acc;
  if (stats) acc.emplace(e.dtype);
  const absl::Status gather =
      GatherView(c.source(), c.SegmentFileOffset(seg), c.segments()[seg].size, w->view(),
                 [&](absl::Span<const uint8_t> chunk) {
                   if (options.digest) hash.Update(chunk);
                   if (acc) acc->Add(chunk);
                 });
  if (!gather.ok()) {
    NoteReadFailure(gather, c, failure);
    return;
  }
  if (options.digest) v->sha256 = hash.HexDigest();
  if (acc) {
    v->stats = acc->stats();
    ReportWeightStats(*v->stats, where, report);
  }
}

}  // namespace

std::optional<InputError> RunDigestPass(const VerifyOptions& options, const Container* c,
                                        VerifyOutcome* out) {
  std::optional<InputError> failure;
  if (c == nullptr || (!options.digest && !options.stats)) return failure;
  Progress progress{.options = &options};
  progress.total = out->ptd.key_count;
  for (const VerifiedManifest& m : out->manifests) progress.total += m.weight_count;
  if (options.digest) {
    for (VerifiedKey& k : out->ptd.keys) {
      DigestKey(*c, &k, &failure);
      progress.Tick();
    }
  }
  for (VerifiedManifest& m : out->manifests) {
    for (VerifiedWeight& v : m.weights) {
      DigestWeight(*c, m.manifest->source, options, &v, &out->report, &failure);
      progress.Tick();
    }
  }
  return failure;
}

}  // namespace ptd::internal
