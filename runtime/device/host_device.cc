#include "ptd/host_device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
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

absl::StatusOr<std::vector<DeviceBuffer>> HostDevice::AllocateMany(
    absl::Span<const size_t> sizes) {
  std::vector<DeviceBuffer> out;
  if (sizes.empty()) return out;
  // Each buffer at a multiple of the alignment; a zero-byte one still gets
  // a distinct address.
  std::vector<size_t> offsets(sizes.size());
  size_t total = 0, data_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t n = std::max<size_t>(sizes[i], 1);
    const size_t rounded = (n + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    if (rounded < n || total + rounded < total) {
      absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
          "host: buffer ", i, " of ", sizes.size(), " (", sizes[i],
          " bytes) takes the total past the address space"));
      s.SetPayload(kAllocateManyIndexPayload, absl::Cord(std::to_string(i)));
      return s;
    }
    offsets[i] = total;
    total += rounded;
    data_bytes += sizes[i];
  }
  auto* base = static_cast<uint8_t*>(std::aligned_alloc(kDeviceAlignment, total));
  if (base == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "host: out of memory allocating ", sizes.size(), " buffers (", total, " bytes)"));
  }
  const uint64_t count = sizes.size();
  Counters& c = *counters_;
  c.allocations.fetch_add(count, std::memory_order_relaxed);
  c.allocated_bytes.fetch_add(data_bytes, std::memory_order_relaxed);
  c.live_allocations.fetch_add(count, std::memory_order_relaxed);
  c.live_bytes.fetch_add(data_bytes, std::memory_order_relaxed);
  std::shared_ptr<void> block(base, [counters = counters_, count, data_bytes](void* q) {
    std::free(q);
    counters->live_allocations.fetch_sub(count, std::memory_order_relaxed);
    counters->live_bytes.fetch_sub(data_bytes, std::memory_order_relaxed);
  });
  out.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    void* p = base + offsets[i];
    // Aliasing: every buffer shares the block's ownership.
    out.emplace_back(std::shared_ptr<void>(block, p), p, sizes[i]);
  }
  return out;
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
