#include "ptd/testing/async_device.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ptd {
namespace {

using Clock = std::chrono::steady_clock;

struct Copy {
  uint64_t id = 0;
  uint32_t stream = 0;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t nbytes = 0;
};

bool Overlaps(const void* p, size_t n, const void* block, size_t size) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto b = reinterpret_cast<uintptr_t>(block);
  return a < b + size && b < a + std::max<size_t>(n, 1);
}

}  // namespace

struct AsyncDevice::State {
  explicit State(const AsyncDeviceOptions& o)
      : options(o), rng(o.seed), outstanding(static_cast<size_t>(std::max(o.streams, 1))) {}

  const AsyncDeviceOptions options;
  std::mutex mu;
  std::condition_variable work_cv;  // Workers: a copy was queued, Release(), stop.
  std::condition_variable done_cv;  // Waiters: a copy completed.
  std::mt19937_64 rng;              // Guarded by mu.
  bool held = false;                // Guarded by mu.
  bool broken_wait = false;         // Guarded by mu.
  bool draining = false;            // Guarded by mu: complete everything now.
  bool stop = false;                // Guarded by mu.
  uint64_t next_id = 1;             // Guarded by mu.
  // Queued copies by due time; copies a worker is carrying out; ids not yet
  // complete, per stream and in all. Guarded by mu.
  std::multimap<Clock::time_point, Copy> queued;
  std::map<uint64_t, Copy> running;
  std::vector<std::set<uint64_t>> outstanding;
  std::set<uint64_t> all_outstanding;
  std::map<uintptr_t, size_t> device_blocks;  // Guarded by mu: base -> size.
  AsyncCounts counts;                         // Guarded by mu.
  DeviceStats stats;                          // Guarded by mu.
  std::vector<std::thread> workers;

  // Marks copy `c` done. REQUIRES: mu held.
  void FinishLocked(const Copy& c) {
    outstanding[c.stream].erase(c.id);
    all_outstanding.erase(c.id);
    if (!all_outstanding.empty() && *all_outstanding.begin() < c.id) ++counts.out_of_order;
    ++counts.completed;
    done_cv.notify_all();
  }

  // Waits until every copy with id <= `last` is done. REQUIRES: lock holds mu.
  void WaitAllLocked(std::unique_lock<std::mutex>& lock, uint64_t last) {
    done_cv.wait(lock, [&] { return all_outstanding.empty() || *all_outstanding.begin() > last; });
  }

  // True when [p, p + n) lies inside one device block. REQUIRES: mu held.
  bool InDeviceMemoryLocked(const void* p, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = device_blocks.upper_bound(a);
    if (it == device_blocks.begin()) return false;
    --it;
    return a - it->first <= it->second && n <= it->second - (a - it->first);
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (stop) return;
      if ((!held || draining) && !queued.empty()) {
        auto it = queued.begin();
        if (draining || it->first <= Clock::now()) {
          const Copy c = it->second;
          queued.erase(it);
          running.emplace(c.id, c);
          lock.unlock();
          std::memcpy(c.dst, c.src, c.nbytes);  // The source is read only now.
          lock.lock();
          running.erase(c.id);
          FinishLocked(c);
          continue;
        }
        // A copy of the due time: wait_until reads it again after waking,
        // when another worker may have taken and erased that entry.
        const Clock::time_point due = it->first;
        work_cv.wait_until(lock, due);
        continue;
      }
      work_cv.wait(lock);
    }
  }

  // A staging block is going: completes the copies still reading it (which
  // a correct loader never leaves), then frees it.
  void FreeStaging(void* block, size_t size) {
    {
      std::unique_lock<std::mutex> lock(mu);
      for (auto it = queued.begin(); it != queued.end();) {
        if (Overlaps(it->second.src, it->second.nbytes, block, size)) {
          const Copy c = it->second;
          it = queued.erase(it);
          std::memcpy(c.dst, c.src, c.nbytes);
          ++counts.staging_freed_in_flight;
          FinishLocked(c);
        } else {
          ++it;
        }
      }
      done_cv.wait(lock, [&] {
        for (const auto& [id, c] : running) {
          if (Overlaps(c.src, c.nbytes, block, size)) return false;
        }
        return true;
      });
      stats.live_staging_bytes -= size;
    }
    ::operator delete (block, std::align_val_t{kDeviceAlignment});
  }

  void FreeDevice(void* block, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      device_blocks.erase(reinterpret_cast<uintptr_t>(block));
      stats.live_allocations -= 1;
      stats.live_bytes -= size;
    }
    ::operator delete (block, std::align_val_t{kDeviceAlignment});
  }
};

AsyncDevice::AsyncDevice(AsyncDeviceOptions options)
    : options_(options), state_(std::make_shared<State>(options)) {
  const int n = std::max(options_.workers, 1);
  for (int i = 0; i < n; ++i) state_->workers.emplace_back([s = state_.get()] { s->Work(); });
}

AsyncDevice::~AsyncDevice() {
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->draining = true;
    state_->work_cv.notify_all();
    state_->WaitAllLocked(lock, ~uint64_t{0});
    state_->stop = true;
    state_->work_cv.notify_all();
  }
  for (std::thread& t : state_->workers) t.join();
}

AsyncCounts AsyncDevice::counts() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counts;
}

void AsyncDevice::Hold() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->held = true;
}

void AsyncDevice::Release() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->held = false;
  state_->work_cv.notify_all();
}

void AsyncDevice::set_broken_wait(bool broken) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->broken_wait = broken;
}

absl::StatusOr<DeviceBuffer> AsyncDevice::Allocate(size_t nbytes) {
  const size_t size = std::max<size_t>(nbytes, 1);
  void* p = ::operator new (size, std::align_val_t{kDeviceAlignment}, std::nothrow);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("async:0: out of memory (", nbytes, " bytes requested)"));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->device_blocks.emplace(reinterpret_cast<uintptr_t>(p), size);
    DeviceStats& s = state_->stats;
    s.allocations += 1;
    s.allocated_bytes += size;
    s.live_allocations += 1;
    s.live_bytes += size;
  }
  std::shared_ptr<void> block(p, [state = state_, size](void* q) { state->FreeDevice(q, size); });
  return DeviceBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<HostBuffer> AsyncDevice::AllocateStaging(size_t nbytes) {
  const size_t size = std::max<size_t>(nbytes, 1);
  void* p = ::operator new (size, std::align_val_t{kDeviceAlignment}, std::nothrow);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("async:0: out of host memory (", nbytes, " bytes of staging)"));
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stats.staging_allocations += 1;
    state_->stats.live_staging_bytes += size;
  }
  std::shared_ptr<void> block(p, [state = state_, size](void* q) { state->FreeStaging(q, size); });
  return HostBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<CopyTicket> AsyncDevice::CopyToDeviceAsync(void* dst, const void* src,
                                                          size_t nbytes) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (nbytes > 0 && !s.InDeviceMemoryLocked(dst, nbytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToDeviceAsync on async:0: the destination (", nbytes,
                     " bytes) is not inside one block of this device's memory"));
  }
  const uint64_t id = s.next_id++;
  const auto stream = static_cast<uint32_t>(id % s.outstanding.size());
  std::uniform_int_distribution<uint32_t> delay(0, options_.max_delay_us);
  const Clock::time_point due = Clock::now() + std::chrono::microseconds(delay(s.rng));
  s.queued.emplace(due, Copy{id, stream, dst, src, nbytes});
  s.outstanding[stream].insert(id);
  s.all_outstanding.insert(id);
  s.counts.copies += 1;
  s.counts.max_in_flight = std::max<uint64_t>(s.counts.max_in_flight, s.all_outstanding.size());
  s.stats.copies += 1;
  s.stats.copied_bytes += nbytes;
  s.work_cv.notify_one();
  return CopyTicket{.id = id, .stream = stream};
}

absl::Status AsyncDevice::Wait(const CopyTicket& ticket) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.counts.waits += 1;
  if (ticket.id == 0 || ticket.id >= s.next_id || ticket.stream >= s.outstanding.size() ||
      ticket.id % s.outstanding.size() != ticket.stream) {
    return absl::InvalidArgumentError(absl::StrCat("Wait on async:0: copy ticket ", ticket.id,
                                                   " (stream ", ticket.stream,
                                                   ") was not issued here"));
  }
  if (s.broken_wait) return absl::OkStatus();
  const std::set<uint64_t>& pending = s.outstanding[ticket.stream];
  s.done_cv.wait(lock, [&] { return pending.empty() || *pending.begin() > ticket.id; });
  return absl::OkStatus();
}

absl::Status AsyncDevice::Synchronize() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->WaitAllLocked(lock, state_->next_id - 1);
  return absl::OkStatus();
}

absl::Status AsyncDevice::CopyToHost(void* dst, const void* src, size_t nbytes) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.counts.copies_to_host += 1;
  s.counts.bytes_to_host += nbytes;
  if (nbytes == 0) return absl::OkStatus();
  if (!s.InDeviceMemoryLocked(src, nbytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToHost on async:0: the source (", nbytes,
                     " bytes) is not inside one block of this device's memory"));
  }
  // Like CudaDevice: sees every copy issued before it.
  s.WaitAllLocked(lock, s.next_id - 1);
  std::memcpy(dst, src, nbytes);
  return absl::OkStatus();
}

DeviceStats AsyncDevice::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace ptd
