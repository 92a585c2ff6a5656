// Fuzz target: Program::Verify over arbitrary .pte bytes.
//
// Verifies through a zero-copy source and through a source without views
// (payloads then borrow from one owned copy); both must agree. Every CUDA
// payload is read in full, and those that claim to be manifests are decoded.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/program.h"
#include "ptd/report.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

void Exercise(const Program& p) {
  for (const CudaDelegate& d : p.cuda_delegates()) {
    const absl::Span<const uint8_t> payload = d.payload.span();
    Touch(payload);
    const bool magic =
        payload.size() >= kManifestMagicPrefix.size() &&
        std::memcmp(payload.data(), kManifestMagicPrefix.data(), kManifestMagicPrefix.size()) == 0;
    FUZZ_CHECK(d.is_manifest == magic);
    if (!d.is_manifest) continue;
    Report report;
    DecodeManifest(payload, Where{.file = p.path(), .source = d.source}, &report);
  }
  size_t total = 0;
  for (const std::string& key : p.named_data_keys()) total += key.size();
  (void)total;
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  std::shared_ptr<const FileSource> source =
      MemorySource(std::vector<uint8_t>(data, data + size), "fuzz.pte");

  Report report;
  auto [p, pp] = fuzz::VerifyBothWays<Program>(source, &report);

  if (p != nullptr) {
    FUZZ_CHECK(p->cuda_delegates().size() == pp->cuda_delegates().size());
    for (size_t i = 0; i < p->cuda_delegates().size(); ++i) {
      const auto a = p->cuda_delegates()[i].payload.span();
      const auto b = pp->cuda_delegates()[i].payload.span();
      FUZZ_CHECK(a.size() == b.size());
      FUZZ_CHECK(a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
    }
    fuzz::Exercise(*p);
    fuzz::Exercise(*pp);
  }
  return 0;
}
