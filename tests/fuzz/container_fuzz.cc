// Fuzz target: Container::Verify over arbitrary .ptd bytes.
//
// Verifies the input through a zero-copy source and through a source
// without views (the pread path); both must reach the same verdict. When a
// container comes back, reads every segment and looks up every key.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/report.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

void Exercise(const Container& c) {
  const std::vector<Segment>& segments = c.segments();
  for (uint32_t i = 0; i < segments.size(); ++i) {
    auto data = c.SegmentData(i);
    // A segment that passed C4 (and lies in the file) must be readable.
    FUZZ_CHECK(data.ok() == segments[i].in_bounds);
    if (!data.ok()) continue;
    FUZZ_CHECK(data->size() == segments[i].size);
    Touch(data->span());
  }
  FUZZ_CHECK(!c.SegmentData(static_cast<uint32_t>(segments.size())).ok());
  for (const NamedDataEntry& e : c.named_data()) {
    const auto size = c.SegmentSize(e);
    FUZZ_CHECK(size.has_value() == (e.segment_index < segments.size()));
    // Keys that broke C6 (missing, empty, not UTF-8) are not indexed; a
    // duplicate finds its first entry.
    const NamedDataEntry* found = c.Find(e.key);
    if (found == nullptr) continue;
    FUZZ_CHECK(found->key == e.key);
    auto bytes = c.Get(e.key);
    if (bytes.ok()) {
      const auto found_size = c.SegmentSize(*found);
      FUZZ_CHECK(found_size.has_value() && bytes->size() == *found_size);
      Touch(bytes->span());
    }
  }
  const uint64_t align = c.ObservedSegmentAlignment();
  FUZZ_CHECK(align >= 1 && align <= (uint64_t{1} << 20) && (align & (align - 1)) == 0);
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  std::shared_ptr<const FileSource> source =
      MemorySource(std::vector<uint8_t>(data, data + size), "fuzz.ptd");

  Report report;
  auto [c, pc] = fuzz::VerifyBothWays<Container>(source, &report);

  if (c != nullptr) fuzz::Exercise(*c);
  if (pc != nullptr) fuzz::Exercise(*pc);
  return 0;
}
