// Fuzz target: a .ptd and a manifest resolved together, then digested.
//
// Input layout: u32 LE manifest length L, then the .ptd bytes, then the
// manifest: the last min(L, rest) bytes. Runs Container::Verify,
// DecodeManifest and WeightSet::Resolve (with the manifest alone, and twice
// under two sources so G4 crosses manifests); for every weight that resolved
// ok and gathers at most 1 MiB, DigestView and GatherView through both a
// zero-copy and a windowed source, checked against a naive gather.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/types/span.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/report.h"
#include "ptd/view_digest.h"
#include "ptd/view_geometry.h"
#include "ptd/weight_set.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/checked_math.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

constexpr uint64_t kMaxDigestBytes = 1 << 20;  // Skip larger gathers.
constexpr uint64_t kMaxNaiveBytes = 64 << 10;  // Reference-check smaller ones.

// The view's elements in row-major order, one element at a time.
std::vector<uint8_t> NaiveGather(absl::Span<const uint8_t> storage, const ViewSpec& v,
                                 uint64_t numel) {
  std::vector<uint8_t> out;
  out.reserve(numel * v.element_size);
  std::vector<int64_t> idx(v.sizes.size(), 0);
  for (uint64_t n = 0; n < numel; ++n) {
    int64_t elem = v.storage_offset;
    for (size_t d = 0; d < idx.size(); ++d) elem += idx[d] * v.strides[d];
    const uint64_t byte = static_cast<uint64_t>(elem) * v.element_size;
    FUZZ_CHECK(internal::RangeInside(byte, v.element_size, storage.size()));
    out.insert(out.end(), storage.begin() + byte, storage.begin() + byte + v.element_size);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < v.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<uint8_t> Gather(const FileSource& source, uint64_t offset, uint64_t nbytes,
                            const ViewSpec& v) {
  std::vector<uint8_t> out;
  const absl::Status s = GatherView(source, offset, nbytes, v, [&](absl::Span<const uint8_t> b) {
    FUZZ_CHECK(!b.empty() && b.size() <= kGatherWindowBytes);
    out.insert(out.end(), b.begin(), b.end());
  });
  FUZZ_CHECK(s.ok());
  return out;
}

void CheckWeights(const Container& c, const FileSource& windowed, const WeightSet& set) {
  for (const ResolvedManifest& rm : set.manifests()) {
    for (const ResolvedWeight& w : rm.weights) {
      if (!w.ok) continue;
      if (w.runtime_owned) {
        // A runtime-owned weight has a computed extent within its manifest
        // size (G2) and no stored bytes to check.
        FUZZ_CHECK(w.extent.has_value() && w.extent->required_nbytes <= w.entry->storage_nbytes);
        continue;
      }
      // An ok weight has a key, a readable segment and a computed extent.
      FUZZ_CHECK(w.named != nullptr && w.extent.has_value());
      const uint32_t seg = w.named->segment_index;
      FUZZ_CHECK(seg < c.segments().size() && c.segments()[seg].in_bounds);
      const uint64_t seg_size = c.segments()[seg].size;
      FUZZ_CHECK(w.extent->required_nbytes <= seg_size);
      const ViewSpec view = w.view();
      const auto gathered = internal::CheckedMul(w.extent->numel, view.element_size);
      if (!gathered || *gathered > kMaxDigestBytes) continue;

      const uint64_t offset = c.SegmentFileOffset(seg);
      const auto digest = DigestView(c.source(), offset, seg_size, view);
      FUZZ_CHECK(digest.ok() && digest->size() == 64);
      const std::vector<uint8_t> direct = Gather(c.source(), offset, seg_size, view);
      FUZZ_CHECK(direct.size() == *gathered);
      FUZZ_CHECK(Gather(windowed, offset, seg_size, view) == direct);
      if (*gathered <= kMaxNaiveBytes) {
        auto storage = c.SegmentData(seg);
        FUZZ_CHECK(storage.ok());
        FUZZ_CHECK(NaiveGather(storage->span(), view, w.extent->numel) == direct);
      }
    }
  }
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  if (size < 4) return 0;
  const uint64_t rest = size - 4;
  const uint64_t manifest_len = std::min<uint64_t>(internal::LoadLE<uint32_t>(data), rest);
  const uint8_t* ptd_begin = data + 4;
  const uint8_t* manifest_begin = data + 4 + (rest - manifest_len);

  std::shared_ptr<const FileSource> source =
      MemorySource(std::vector<uint8_t>(ptd_begin, manifest_begin), "fuzz.ptd");
  // Separate heap copy so ASan sees reads past the manifest's end.
  const std::vector<uint8_t> manifest_bytes(manifest_begin, data + size);

  Report report;
  std::unique_ptr<Container> c = Container::Verify(source, &report);
  std::optional<Manifest> m =
      DecodeManifest(manifest_bytes, Where{.file = "fuzz.manifest", .source = "manifest"}, &report);
  if (c == nullptr || !m.has_value()) return 0;

  const fuzz::NoViewSource windowed(source);
  const SourcedManifest one[] = {{"manifest", *m}};
  const WeightSet set = WeightSet::Resolve(*c, one, &report);
  FUZZ_CHECK(set.manifests().size() == 1 && set.manifests()[0].weights.size() == m->entries.size());
  fuzz::CheckWeights(*c, windowed, set);

  Report twice_report;
  const SourcedManifest two[] = {{"manifest", *m}, {"pte:forward:0", *m}};
  const WeightSet twice = WeightSet::Resolve(*c, two, &twice_report);
  FUZZ_CHECK(twice.manifests().size() == 2);
  return 0;
}
