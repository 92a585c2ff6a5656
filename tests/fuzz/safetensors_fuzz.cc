// Fuzz target: SafetensorsFile::Open over arbitrary bytes (S1-S6).
//
// Opens the input through a zero-copy source and through a source without
// views; both must reach the same verdict and message. When a file comes
// back: its tensors tile the data buffer in order, each holds its shape's
// bytes, Find() finds each, every byte reads, and a read past a tensor is
// OutOfRange. Then the writer lays the same tensors and metadata out again
// (PlanSafetensors), and the reader accepts what it wrote, with the same
// tensors, metadata and bytes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptd/file_source.h"
#include "ptd/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

std::vector<uint8_t> ReadAll(const SafetensorsFile& f, const SafetensorsTensor& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  FUZZ_CHECK(f.Read(t, 0, absl::MakeSpan(bytes)).ok());
  return bytes;
}

void Exercise(const SafetensorsFile& f) {
  uint64_t expected = 0;
  for (const SafetensorsTensor& t : f.tensors()) {
    FUZZ_CHECK(t.dtype != nullptr && FindSafetensorsDtype(t.dtype->name) == t.dtype);
    FUZZ_CHECK(t.begin == expected && t.end >= t.begin);
    uint64_t bits = t.dtype->bits;
    for (uint64_t d : t.shape) bits *= d;  // Mod 2^64, exact: S5 held.
    FUZZ_CHECK(bits % 8 == 0 && bits / 8 == t.nbytes());
    expected = t.end;
    const SafetensorsTensor* found = f.Find(t.name);
    FUZZ_CHECK(found == &t);
    Touch(ReadAll(f, t));
    uint8_t one = 0;
    FUZZ_CHECK(f.Read(t, t.nbytes(), absl::MakeSpan(&one, 1)).code() ==
               absl::StatusCode::kOutOfRange);
  }
  FUZZ_CHECK(f.data_offset() + expected == f.source().size());
}

void RoundTrip(const SafetensorsFile& f) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const SafetensorsTensor& t : f.tensors()) {
    if (t.name.empty()) return;  // The reader takes "", the writer does not.
    specs.push_back({t.name, t.dtype, t.shape});
  }
  auto layout = PlanSafetensors(specs, f.metadata());
  FUZZ_CHECK(layout.ok());
  std::vector<uint8_t> bytes = layout->header;
  for (const SafetensorsTensor& t : layout->tensors) {
    const std::vector<uint8_t> data = ReadAll(f, *f.Find(t.name));
    bytes.insert(bytes.end(), data.begin(), data.end());
  }
  FUZZ_CHECK(bytes.size() == layout->file_size());
  auto again = SafetensorsFile::Open(MemorySource(std::move(bytes), "again.safetensors"));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->metadata() == f.metadata());
  FUZZ_CHECK(again->data_offset() % 8 == 0);
  FUZZ_CHECK(again->tensors().size() == f.tensors().size());
  for (const SafetensorsTensor& t : again->tensors()) {
    const SafetensorsTensor* old = f.Find(t.name);
    FUZZ_CHECK(old != nullptr && old->dtype == t.dtype && old->shape == t.shape);
    FUZZ_CHECK(ReadAll(*again, t) == ReadAll(f, *old));
  }
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  std::shared_ptr<const FileSource> source =
      MemorySource(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
  auto viewed = SafetensorsFile::Open(source);
  auto read = SafetensorsFile::Open(std::make_shared<fuzz::NoViewSource>(source));
  FUZZ_CHECK(viewed.ok() == read.ok());
  if (!viewed.ok()) {
    FUZZ_CHECK(viewed.status() == read.status());
    FUZZ_CHECK(viewed.status().code() == absl::StatusCode::kDataLoss);
    return 0;
  }
  fuzz::Exercise(*viewed);
  fuzz::Exercise(*read);
  fuzz::RoundTrip(*viewed);
  return 0;
}
