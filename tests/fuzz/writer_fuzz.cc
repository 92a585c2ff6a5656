// Fuzz target: random tensors and views through the writer, then the
// verifier.
//
// The input is read as a sequence of weights (fqn choice, dtype, device,
// storage size, original/clone, offsets, sizes, strides, the original's
// TensorProperties). Each goes through CudaWeightWriter::Add. Then:
//   - what the writer accepted, the verifier accepts: the written .ptd and
//     manifest open as a WeightBundle with every weight ok, through both
//     layouts (ETCUDAFQN0 and, where it applies, ETCUDAFQN3);
//   - what the writer refused, it refused under a W rule (or an M5/M6 field
//     check) that agrees with the G rules: W3 and W1's "requires" only when
//     ComputeExtent fails (G1) or needs more than the bytes given (G2).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "ptd/file_source.h"
#include "ptd/scalar_type.h"
#include "ptd/view_geometry.h"
#include "ptd/weight_bundle.h"
#include "ptd/weight_writer.h"
#include "runtime/internal/strings.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

// Takes little-endian integers off the front of the input; zeros when empty.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint64_t Take(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n && p_ != end_; ++i) v |= uint64_t{*p_++} << (8 * i);
    return v;
  }
  // A small signed value, mostly in [-2, 61], sometimes huge.
  int64_t Small() {
    const uint64_t tag = Take(1);
    if (tag < 240) return static_cast<int64_t>(tag % 64) - 2;
    return static_cast<int64_t>(Take(8));
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

constexpr size_t kMaxWeights = 16;
constexpr uint64_t kMaxStorage = 4096;

bool HasRule(const absl::Status& s, std::string_view rule) {
  return absl::EndsWith(s.message(), absl::StrCat("(", internal::Sv(rule), ")"));
}

void Run(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  CudaWeightWriter writer("aoti_so");
  std::vector<std::vector<uint8_t>> storages;  // Kept alive for the writer.
  storages.reserve(kMaxWeights);
  size_t accepted = 0;
  for (size_t i = 0; i < kMaxWeights && !in.empty(); ++i) {
    WeightSpec w;
    const uint64_t name = in.Take(1);
    w.fqn = name % 16 == 15 ? ""
            : name % 8 == 7 ? "_tensor_constant0"
                            : absl::StrCat("w", name % 12);
    w.dtype = static_cast<int32_t>(in.Take(1) % 32);
    w.device_type = static_cast<int32_t>(in.Take(1) % 3);
    storages.emplace_back(in.Take(2) % kMaxStorage, static_cast<uint8_t>(i));
    w.value.storage = storages.back();
    w.value.is_original_storage = in.Take(1) & 1;
    w.value.storage_offset = in.Small();
    const size_t rank = in.Take(1) % 5;
    for (size_t d = 0; d < rank; ++d) {
      w.properties.shape.push_back(in.Small());
      w.properties.stride.push_back(in.Small());
    }
    if (in.Take(1) & 1) {  // A value that is not a clone of the original.
      w.value.sizes = w.properties.shape;
      w.value.strides = w.properties.stride;
    } else {
      w.value.sizes = w.properties.shape;
      w.value.strides = w.properties.stride;
      if (!w.value.sizes.empty()) {
        // Another last size than the original's, without overflowing.
        int64_t& last = w.value.sizes.back();
        last = last == std::numeric_limits<int64_t>::max() ? last - 1 : last + 1;
      }
    }
    w.properties.offset = in.Small();
    const uint64_t ss = in.Take(2);
    if (ss & 1) w.properties.storage_size = ss >> 1;

    const absl::Status s = writer.Add(w);
    if (s.ok()) {
      ++accepted;
      continue;
    }
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    const bool field = HasRule(s, "M5") || HasRule(s, "M6");
    FUZZ_CHECK(field || HasRule(s, "W1") || HasRule(s, "W2") || HasRule(s, "W3"));
    if (HasRule(s, "W3")) {
      // The G rules agree: G1 (bad geometry) or G2 (needs more than given).
      const auto elem = ElementSize(w.dtype);
      FUZZ_CHECK(elem.has_value());
      const bool clone = !w.value.is_original_storage && w.value.sizes == w.properties.shape &&
                         w.value.strides == w.properties.stride;
      const GeometryResult g =
          ComputeExtent(ViewSpec{.element_size = *elem,
                                 .storage_offset = clone ? 0 : w.properties.offset,
                                 .sizes = w.properties.shape,
                                 .strides = w.properties.stride});
      FUZZ_CHECK(!g.ok() || g.extent.required_nbytes > w.value.storage.size());
    }
  }

  // What the writer accepted, the verifier accepts.
  auto manifest = writer.EncodedManifest();
  FUZZ_CHECK(manifest.ok());
  auto ptd = writer.ptd().Serialize();
  FUZZ_CHECK(ptd.ok());
  BundleSources sources{.ptd = MemorySource(*std::move(ptd), "fuzz.ptd"),
                        .manifest = MemorySource(*std::move(manifest), "fuzz.manifest")};
  auto bundle = WeightBundle::Open(sources);
  FUZZ_CHECK(bundle.ok());
  FUZZ_CHECK(bundle->manifests().size() == 1);
  FUZZ_CHECK(bundle->manifests()[0].manifest.entries.size() == accepted);
  for (const ResolvedWeight& rw : bundle->weights()->manifests()[0].weights) {
    FUZZ_CHECK(rw.ok);
  }
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ptd::fuzz::Run(data, size);
  return 0;
}
