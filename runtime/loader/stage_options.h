// What each stage of a load reads of LoadOptions, and nothing more. The
// loader (loader.cc) cuts the caller's LoadOptions into these, so that a
// stage's signature says which options can change what it does, and an
// option added for one stage reaches only that stage. Private to
// ptd::loader. The spans borrow from the LoadOptions, which outlives the
// load.
#ifndef PTD_RUNTIME_LOADER_STAGE_OPTIONS_H_
#define PTD_RUNTIME_LOADER_STAGE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/types/span.h"

#include "ptd/loader.h"

namespace ptd::internal {

// Stage 1, plan: which weights, which variant, one storage per key or per
// stored segment.
struct PlanOptions {
  absl::Span<const std::string> fqns;  // LoadOptions::fqns.
  std::optional<uint32_t> sm;          // LoadOptions::sm.
  bool share_segments = false;         // LoadOptions::share_segments.
};

// Stage 2, place: where each storage goes.
struct PlaceOptions {
  std::optional<uint64_t> device_budget_bytes;  // LoadOptions::device_budget_bytes.
  absl::Span<const std::string> host_fqns;      // LoadOptions::host_fqns.
};

// Stage 3, transfer: how the bytes are read and copied.
struct TransferOptions {
  IoMode io = IoMode::kAuto;
  size_t threads = 1;
  size_t ring_slots = 0;
  size_t ring_slot_bytes = 0;
  size_t max_read_bytes = 0;
  size_t max_gap_bytes = 0;
  std::function<bool(uint64_t done, uint64_t total)> progress;
};

inline PlanOptions PlanOptionsOf(const LoadOptions& o) {
  return PlanOptions{.fqns = o.fqns, .sm = o.sm, .share_segments = o.share_segments};
}

inline PlaceOptions PlaceOptionsOf(const LoadOptions& o) {
  return PlaceOptions{.device_budget_bytes = o.device_budget_bytes, .host_fqns = o.host_fqns};
}

inline TransferOptions TransferOptionsOf(const LoadOptions& o) {
  return TransferOptions{.io = o.io,
                         .threads = o.threads,
                         .ring_slots = o.ring_slots,
                         .ring_slot_bytes = o.ring_slot_bytes,
                         .max_read_bytes = o.max_read_bytes,
                         .max_gap_bytes = o.max_gap_bytes,
                         .progress = o.progress};
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_STAGE_OPTIONS_H_
