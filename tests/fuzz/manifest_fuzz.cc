// Fuzz target: DecodeManifest over arbitrary manifest bytes.
//
// Invariants (a violation traps):
//   - a manifest decoded without errors encodes back to exactly the input
//     (the format has one encoding per manifest);
//   - whatever EncodeManifest accepts decodes without errors and encodes
//     again to the same bytes;
//   - ParseManifest (the strict form) agrees with the report;
//   - SelectVariant returns an index inside the variant list.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

#include "ptd/manifest.h"
#include "ptd/report.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  // A heap copy of exactly `size` bytes, so ASan sees any read past the end.
  const std::vector<uint8_t> input(data, data + size);
  const absl::Span<const uint8_t> bytes(input);
  const Where where{.file = "fuzz.manifest", .source = "manifest"};

  Report report;
  std::optional<Manifest> m = DecodeManifest(bytes, where, &report);
  FUZZ_CHECK(m.has_value() || !report.ok());
  FUZZ_CHECK(ParseManifest(bytes, "fuzz.manifest").ok() == report.ok());
  if (!m) return 0;

  for (uint32_t sm : {0u, 70u, 80u, 86u, 90u, 100u, 120u}) {
    auto choice = SelectVariant(m->variants, sm);
    if (choice.ok()) FUZZ_CHECK(choice->index < m->variants.size());
  }

  auto encoded = EncodeManifest(*m);
  if (report.ok()) {
    FUZZ_CHECK(encoded.ok());
    FUZZ_CHECK(*encoded == input);
  }
  if (!encoded.ok()) return 0;

  Report again;
  std::optional<Manifest> m2 = DecodeManifest(*encoded, where, &again);
  FUZZ_CHECK(m2.has_value() && again.ok());
  auto reencoded = EncodeManifest(*m2);
  FUZZ_CHECK(reencoded.ok() && *reencoded == *encoded);
  return 0;
}
