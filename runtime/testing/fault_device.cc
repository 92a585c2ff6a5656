#include "ptd/testing/fault_device.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/internal/status_macros.h"

namespace ptd {

struct FaultDevice::Shared {
  std::mutex mu;
  FaultCounts counts;
};

FaultDevice::FaultDevice(std::shared_ptr<Device> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)), shared_(std::make_shared<Shared>()) {}

FaultDevice::~FaultDevice() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)FlushLocked(~uint64_t{0});
}

FaultCounts FaultDevice::counts() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->counts;
}

bool FaultDevice::host_accessible() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_.host_accessible.value_or(inner_->host_accessible());
}

absl::StatusOr<DeviceMemoryInfo> FaultDevice::MemoryInfo() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (plan_.memory_info) return *plan_.memory_info;
  }
  return inner_->MemoryInfo();
}

template <typename Buffer>
Buffer FaultDevice::Wrap(Buffer inner) {
  constexpr bool staging = std::is_same_v<Buffer, HostBuffer>;
  const size_t n = inner.size();
  void* data = inner.data();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    FaultCounts& c = shared_->counts;
    if (staging) {
      c.live_staging_bytes += n;
      c.peak_live_staging_bytes = std::max(c.peak_live_staging_bytes, c.live_staging_bytes);
    } else {
      ++c.live_allocations;
    }
  }
  // The wrapper block holds the inner one and updates the live counters
  // when the last handle goes.
  auto holder = new Buffer(std::move(inner));
  std::shared_ptr<void> block(holder, [shared = shared_, n](void* p) {
    delete static_cast<Buffer*>(p);
    std::lock_guard<std::mutex> lock(shared->mu);
    if (staging) {
      shared->counts.live_staging_bytes -= n;
    } else {
      --shared->counts.live_allocations;
    }
  });
  return Buffer(std::move(block), data, n);
}

absl::StatusOr<DeviceBuffer> FaultDevice::Allocate(size_t nbytes) {
  uint64_t n;
  absl::Status fail;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    n = ++shared_->counts.allocations;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == plan_.fail_allocation) fail = plan_.status;
  }
  if (!fail.ok()) return fail;
  auto b = inner_->Allocate(nbytes);
  if (!b.ok()) return b.status();
  return Wrap(*std::move(b));
}

absl::Status FaultDevice::PrepareWrite(void* p, size_t n) {
  uint64_t count;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    count = ++shared_->counts.prepares;
    shared_->counts.prepared_bytes += n;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count == plan_.fail_prepare) return plan_.status;
  }
  return inner_->PrepareWrite(p, n);
}

absl::StatusOr<HostBuffer> FaultDevice::AllocateStaging(size_t nbytes) {
  uint64_t n;
  absl::Status fail;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    n = ++shared_->counts.staging_allocations;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == plan_.fail_staging) fail = plan_.status;
  }
  if (!fail.ok()) return fail;
  auto b = inner_->AllocateStaging(nbytes);
  if (!b.ok()) return b.status();
  return Wrap(*std::move(b));
}

absl::StatusOr<CopyTicket> FaultDevice::CopyToDeviceAsync(void* dst, const void* src,
                                                          size_t nbytes) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    n = ++shared_->counts.copies;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (n == plan_.fail_copy) return plan_.status;
  const uint64_t id = ++next_ticket_;
  if (plan_.defer_copies) {
    pending_.push_back({id, dst, src, nbytes});
    return CopyTicket{.id = id, .stream = 0};
  }
  auto t = inner_->CopyToDeviceAsync(dst, src, nbytes);
  if (!t.ok()) return t.status();
  // Our ids are issue order; Wait() waits on the wrapped device's ticket, so
  // a wrapped asynchronous device stays asynchronous.
  inner_tickets_.emplace(id, *t);
  return CopyTicket{.id = id, .stream = t->stream, .runtime_calls = t->runtime_calls};
}

absl::Status FaultDevice::FlushLocked(uint64_t id) {
  while (!pending_.empty() && pending_.front().id <= id) {
    const Pending p = pending_.front();
    pending_.pop_front();
    auto t = inner_->CopyToDeviceAsync(p.dst, p.src, p.nbytes);
    if (!t.ok()) return t.status();
    auto st = inner_->Wait(*t);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status FaultDevice::Wait(const CopyTicket& ticket) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    n = ++shared_->counts.waits;
  }
  std::optional<CopyTicket> inner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == plan_.fail_wait) return plan_.status;
    PTD_RETURN_IF_ERROR(FlushLocked(ticket.id));
    auto it = inner_tickets_.find(ticket.id);
    if (it != inner_tickets_.end()) {
      inner = it->second;
      inner_tickets_.erase(it);
    }
  }
  // Not under mu_: other threads' calls need not wait for this copy.
  if (inner) return inner_->Wait(*inner);
  return absl::OkStatus();
}

absl::Status FaultDevice::Synchronize() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PTD_RETURN_IF_ERROR(FlushLocked(~uint64_t{0}));
    inner_tickets_.clear();
  }
  return inner_->Synchronize();
}

absl::Status FaultDevice::CopyToHost(void* dst, const void* src, size_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto st = FlushLocked(~uint64_t{0});
    if (!st.ok()) return st;
  }
  return inner_->CopyToHost(dst, src, nbytes);
}

}  // namespace ptd
