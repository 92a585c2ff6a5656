// Fuzz target: end to end, bytes -> WeightBundle -> LoadWeights -> digests.
//
// Input layout (the weights target's, so its corpus seeds this one): u32 LE
// word W, then the .ptd bytes, then the manifest: the last
// min(W & 0xffff, rest) bytes. Bits 16.. of W choose how to load:
//   bit 16  no manifest: the bundle is the container alone (every key)
//   bit 17  staging path: a FaultDevice posing as a device the host cannot
//           address, with a ring of small slots and deferred copies
//   bit 18  small reads: max_read_bytes 64, max_gap_bytes 16 (coalescing
//           and chunking on inputs of a few KiB)
//   bit 19  a fault: the (W >> 24 & 7)+1-th allocation, staging
//           allocation, copy or wait (bits 22..23 choose which) fails
//   bit 20  a subset: load only the first weight of the manifest
//   bit 21  the ExecuTorch entry point: LoadWeights(manifest bytes,
//           ByteSource over the container) instead of the bundle's
//
// Invariants: nothing crashes or leaks; a verified bundle loads on the host
// device unless a fault was injected (then the load fails and the device
// holds no block); every loaded weight digests from loaded memory to the
// verifier's digest of the same view, and every storage to the sha256 of its
// segment.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptd/byte_source.h"
#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "ptd/testing/fault_device.h"
#include "ptd/view_digest.h"
#include "ptd/weight_bundle.h"
#include "runtime/internal/bytes_le.h"
#include "runtime/internal/checked_math.h"
#include "tests/fuzz/fuzz_support.h"

namespace ptd::fuzz {
namespace {

constexpr uint64_t kMaxDigestBytes = 1 << 20;  // Skip larger gathers.

// Every loaded weight and storage digests as the file's bytes do.
void CheckLoaded(const Container& c, const LoadedWeights& loaded) {
  for (const LoadedStorage& s : loaded.storages()) {
    FUZZ_CHECK(!s.keys.empty());
    const NamedDataEntry* e = c.Find(s.keys.front());
    FUZZ_CHECK(e != nullptr);
    auto bytes = c.SegmentData(e->segment_index);
    FUZZ_CHECK(bytes.ok() && bytes->size() == s.nbytes);
    auto digest = DigestLoadedStorage(loaded, s);
    FUZZ_CHECK(digest.ok() && *digest == Sha256Hex(bytes->span()));
  }
  for (const LoadedWeight& w : loaded.weights()) {
    FUZZ_CHECK(w.storage < loaded.storages().size());
    const LoadedStorage& s = loaded.storage(w);
    const ViewSpec view = w.view();
    const GeometryResult geometry = ComputeExtent(view);
    FUZZ_CHECK(geometry.ok() && geometry.extent.required_nbytes <= s.nbytes);
    const auto gathered = internal::CheckedMul(geometry.extent.numel, view.element_size);
    if (!gathered || *gathered > kMaxDigestBytes) continue;
    auto from_memory = DigestLoadedWeight(loaded, w);
    FUZZ_CHECK(from_memory.ok() && from_memory->size() == 64);
    const NamedDataEntry* e = c.Find(w.storage_key);
    FUZZ_CHECK(e != nullptr);
    const uint32_t seg = e->segment_index;
    auto from_file = DigestView(c.source(), c.SegmentFileOffset(seg), c.segments()[seg].size, view);
    FUZZ_CHECK(from_file.ok() && *from_file == *from_memory);
  }
}

}  // namespace
}  // namespace ptd::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  if (size < 4) return 0;
  const uint32_t word = internal::LoadLE<uint32_t>(data);
  const bool no_manifest = word & (1u << 16);
  const bool staging = word & (1u << 17);
  const bool small_reads = word & (1u << 18);
  const bool fault = word & (1u << 19);
  const bool subset = word & (1u << 20);
  const bool executorch_entry = word & (1u << 21);
  const uint64_t fault_at = ((word >> 24) & 7) + 1;
  const uint32_t fault_kind = (word >> 22) & 3;

  const uint64_t rest = size - 4;
  const uint64_t manifest_len = std::min<uint64_t>(word & 0xffff, rest);
  const uint8_t* ptd_begin = data + 4;
  const uint8_t* manifest_begin = data + 4 + (rest - manifest_len);
  std::vector<uint8_t> manifest_bytes(manifest_begin, data + size);

  BundleSources sources;
  sources.ptd = MemorySource(std::vector<uint8_t>(ptd_begin, manifest_begin), "fuzz.ptd");
  if (!no_manifest) sources.manifest = MemorySource(manifest_bytes, "fuzz.manifest");

  FaultPlan plan;
  if (fault) {
    switch (fault_kind) {
      case 0:
        plan.fail_allocation = fault_at;
        break;
      case 1:
        plan.fail_staging = fault_at;
        break;
      case 2:
        plan.fail_copy = fault_at;
        break;
      default:
        plan.fail_wait = fault_at;
        break;
    }
  }
  if (staging) {
    plan.host_accessible = false;
    plan.defer_copies = true;
  }
  auto device = std::make_shared<FaultDevice>(std::make_shared<HostDevice>(), plan);

  LoadOptions options;
  options.threads = 1;  // Deterministic: one input, one sequence of calls.
  options.ring_slots = 2;
  options.ring_slot_bytes = 256;
  if (small_reads) {
    options.max_read_bytes = 64;
    options.max_gap_bytes = 16;
  }

  std::optional<absl::StatusOr<LoadedWeights>> loaded;
  std::unique_ptr<Container> container;
  if (executorch_entry) {
    // The runtime's path: the container opened on its own, the manifest
    // checked only against the sizes the ByteSource reports.
    auto opened = Container::Open(sources.ptd);
    if (!opened.ok()) return 0;
    container = std::move(*opened);
    const std::unique_ptr<ByteSource> bytes = MakeContainerByteSource(*container);
    loaded = LoadWeights(manifest_bytes, *bytes, device, options);
  } else {
    auto bundle = WeightBundle::Open(sources);
    if (!bundle.ok()) return 0;
    if (subset && !bundle->manifests().empty() &&
        !bundle->manifests()[0].manifest.entries.empty()) {
      options.fqns.emplace_back(bundle->manifests()[0].manifest.entries[0].fqn);
    }
    loaded = LoadWeights(std::make_shared<const WeightBundle>(*std::move(bundle)), device, options);
    if (loaded->ok()) {
      // Reopen the same bytes for the checks: the checks read the container
      // of their own, not the bundle the loaded weights hold.
      auto reopened = Container::Open(sources.ptd);
      FUZZ_CHECK(reopened.ok());
      container = std::move(*reopened);
    }
  }
  if (!loaded->ok()) {
    // A failed load frees everything it allocated.
    FUZZ_CHECK(device->counts().live_allocations == 0);
    FUZZ_CHECK(device->counts().live_staging_bytes == 0);
    // Without an injected fault, only the ExecuTorch entry point may refuse
    // (it verifies the manifest there).
    FUZZ_CHECK(fault || executorch_entry);
    return 0;
  }
  FUZZ_CHECK(container != nullptr);
  fuzz::CheckLoaded(*container, **loaded);
  return 0;
}
