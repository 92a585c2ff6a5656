#include "ptd/host_device.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace ptd {

absl::StatusOr<DeviceBuffer> HostDevice::AllocateBlock(size_t nbytes, bool staging) {
  // aligned_alloc needs a size that is a multiple of the alignment, and a
  // zero-byte buffer still gets a distinct, freeable block.
  const size_t rounded =
      nbytes == 0 ? kDeviceAlignment
                  : (nbytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  if (rounded < nbytes) {
    return absl::ResourceExhaustedError(absl::StrCat("host: cannot allocate ", nbytes, " bytes"));
  }
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host: out of memory allocating ", nbytes, " bytes"));
  }
  Counters& c = *counters_;
  if (staging) {
    c.staging_allocations.fetch_add(1, std::memory_order_relaxed);
    c.live_staging_bytes.fetch_add(nbytes, std::memory_order_relaxed);
  } else {
    c.allocations.fetch_add(1, std::memory_order_relaxed);
    c.allocated_bytes.fetch_add(nbytes, std::memory_order_relaxed);
    c.live_allocations.fetch_add(1, std::memory_order_relaxed);
    c.live_bytes.fetch_add(nbytes, std::memory_order_relaxed);
  }
  std::shared_ptr<void> block(p, [counters = counters_, nbytes, staging](void* q) {
    std::free(q);
    if (staging) {
      counters->live_staging_bytes.fetch_sub(nbytes, std::memory_order_relaxed);
    } else {
      counters->live_allocations.fetch_sub(1, std::memory_order_relaxed);
      counters->live_bytes.fetch_sub(nbytes, std::memory_order_relaxed);
    }
  });
  return DeviceBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<DeviceBuffer> HostDevice::Allocate(size_t nbytes) {
  return AllocateBlock(nbytes, /*staging=*/false);
}

absl::StatusOr<HostBuffer> HostDevice::AllocateStaging(size_t nbytes) {
  return AllocateBlock(nbytes, /*staging=*/true);
}

absl::StatusOr<CopyTicket> HostDevice::CopyToDeviceAsync(void* dst, const void* src,
                                                         size_t nbytes) {
  if (nbytes > 0) std::memcpy(dst, src, nbytes);
  counters_->copies.fetch_add(1, std::memory_order_relaxed);
  counters_->copied_bytes.fetch_add(nbytes, std::memory_order_relaxed);
  return CopyTicket{.id = counters_->next_ticket.fetch_add(1) + 1, .stream = 0};
}

absl::Status HostDevice::Wait(const CopyTicket& ticket) {
  (void)ticket;  // Copies complete before CopyToDeviceAsync returns.
  return absl::OkStatus();
}

absl::Status HostDevice::CopyToHost(void* dst, const void* src, size_t nbytes) {
  if (nbytes > 0) std::memcpy(dst, src, nbytes);
  return absl::OkStatus();
}

DeviceStats HostDevice::stats() const {
  const Counters& c = *counters_;
  const auto get = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return DeviceStats{.allocations = get(c.allocations),
                     .allocated_bytes = get(c.allocated_bytes),
                     .live_allocations = get(c.live_allocations),
                     .live_bytes = get(c.live_bytes),
                     .staging_allocations = get(c.staging_allocations),
                     .live_staging_bytes = get(c.live_staging_bytes),
                     .copies = get(c.copies),
                     .copied_bytes = get(c.copied_bytes)};
}

}  // namespace ptd
