// Transfer::RunStaged: the staging ring of a device that is not
// host-accessible (transfer.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "runtime/internal/status_macros.h"
#include "runtime/loader/transfer.h"

namespace ptd::internal {

// One RunStaged: reader threads fill a ring of staging slots while the
// calling thread drains it, copying each filled slot to the device and
// waiting on the oldest copy, which frees its slot.
class Transfer::StagedRun {
 public:
  StagedRun(Transfer& transfer, Device& device, const ReadPlan& plan)
      : t_(transfer), device_(device), plan_(plan), scatter_(device.supports_scatter()) {
    if (scatter_) {
      // Room after a slot's bytes for the table of its pieces (ScatterPiece).
      uint32_t max_pieces = 0;
      for (const ReadItem& item : plan_.items) max_pieces = std::max(max_pieces, item.num_pieces);
      table_room_ = alignof(ScatterPiece) + size_t{max_pieces} * sizeof(ScatterPiece);
    }
  }

  absl::Status Run() {
    const size_t num_readers_wanted = std::max<size_t>(1, t_.options_.threads);
    PTD_RETURN_IF_ERROR(AllocateSlots(num_readers_wanted));
    const size_t num_readers = std::min(num_readers_wanted, slots_.size());
    std::vector<std::thread> readers;
    readers.reserve(num_readers);
    for (size_t t = 0; t < num_readers; ++t) readers.emplace_back([this] { ReadIntoSlots(); });
    Drain();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;  // Readers still waiting for a slot leave.
      free_cv_.notify_all();
    }
    for (std::thread& t : readers) t.join();
    // No staging buffer (nor, on error, destination) may go while a copy
    // from it is in flight. After a failed wait the state of its copies is
    // unknown: synchronize the device.
    while (!in_flight_.empty()) {
      (void)WaitSlot(in_flight_.front());
      in_flight_.pop_front();
    }
    if (!error_.ok()) (void)device_.Synchronize();
    return error_;
  }

 private:
  struct Slot {
    HostBuffer buffer;
    size_t item = 0;
    std::vector<CopyTicket> tickets;
    // Device memory the slot's block is copied to when its pieces are
    // scattered (allocated at the first scatter; freed after the waits).
    DeviceBuffer scratch;
  };

  // Two slots beyond the readers (unless LoadOptions::ring_slots says):
  // one being copied, one waited on, while every reader fills one.
  absl::Status AllocateSlots(size_t num_readers_wanted) {
    const size_t ring_slots =
        t_.options_.ring_slots != 0 ? t_.options_.ring_slots : num_readers_wanted + 2;
    const size_t num_slots = std::max<size_t>(1, std::min(ring_slots, plan_.items.size()));
    slots_.resize(num_slots);
    for (size_t i = 0; i < num_slots; ++i) {
      auto b = device_.AllocateStaging(plan_.max_item_bytes + table_room_);
      if (!b.ok()) {
        return t_.Fail(plan_, plan_.items[0], "stage",
                       absl::Status(b.status().code(),
                                    absl::StrCat("ring slot ", i, " of ", num_slots, " (",
                                                 plan_.max_item_bytes, " bytes) on ",
                                                 device_.name(), ": ", b.status().message())));
      }
      slots_[i].buffer = *std::move(b);
      free_slots_.push_back(i);
    }
    return absl::OkStatus();
  }

  // A reader thread: takes a free slot, reads the next item into it, hands
  // it to the drain; until the items run out or the run stops.
  void ReadIntoSlots() {
    for (;;) {
      size_t slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        free_cv_.wait(lock, [&] { return stop_ || !free_slots_.empty(); });
        if (stop_) return;
        slot = free_slots_.front();
        free_slots_.pop_front();
      }
      const size_t i = next_.fetch_add(1);
      if (i >= plan_.items.size()) {
        std::lock_guard<std::mutex> lock(mu_);
        free_slots_.push_back(slot);
        free_cv_.notify_one();
        return;
      }
      absl::Status st =
          t_.Read(plan_, plan_.items[i], static_cast<uint8_t*>(slots_[slot].buffer.data()));
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok()) {
        SetError(std::move(st));
        return;
      }
      slots_[slot].item = i;
      filled_.push_back(slot);
      filled_cv_.notify_one();
    }
  }

  // The calling thread: copies filled slots to the device, and waits on
  // the oldest copy when nothing is filled (which frees a slot).
  void Drain() {
    while (completed_ < plan_.items.size()) {
      std::optional<size_t> slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!stop_ && filled_.empty() && in_flight_.empty()) {
          filled_cv_.wait(lock, [&] { return stop_ || !filled_.empty(); });
        }
        if (stop_) return;
        if (!filled_.empty()) {
          slot = filled_.front();
          filled_.pop_front();
        }
      }
      if (!(slot ? IssueCopies(*slot) : RetireOldest())) return;
    }
  }

  // Issues a filled slot's copies, as one batch (one ticket per stream on a
  // GPU). False, the error recorded, when that fails.
  bool IssueCopies(size_t slot) {
    const ReadItem& item = plan_.items[slots_[slot].item];
    const auto t0 = Clock::now();
    requests_.clear();
    uint32_t last_run = StorageJob::kNoRun;
    for (uint32_t k = 0; k < item.num_pieces; ++k) {
      const Piece& p = plan_.pieces[item.first_piece + k];
      const StorageJob& job = t_.storages_[p.storage];
      uint8_t* dst = job.dest + p.dst_offset;
      const uint8_t* src = static_cast<const uint8_t*>(slots_[slot].buffer.data()) + p.src_offset;
      // A run lies in device memory as in the file: the next piece of the
      // same run is as far from the last in both, and one copy takes the
      // two with the padding between (AllocateList's FileRuns).
      if (job.run != StorageJob::kNoRun && job.run == last_run) {
        CopyRequest& r = requests_.back();
        const uint8_t* r_src = static_cast<const uint8_t*>(r.src);
        const uint8_t* r_dst = static_cast<const uint8_t*>(r.dst);
        if (src >= r_src + r.nbytes && dst - r_dst == src - r_src) {
          r.nbytes = static_cast<size_t>(src + p.nbytes - r_src);
          continue;
        }
      }
      requests_.push_back(CopyRequest{.dst = dst, .src = src, .nbytes = p.nbytes});
      last_run = job.run;
    }
    auto tickets = requests_.size() >= kScatterMinCopies && scatter_
                       ? Scatter(slot, item)
                       : device_.CopyManyToDeviceAsync(requests_);
    absl::Status st = tickets.status();
    if (st.ok()) {
      t_.copies_.fetch_add(item.num_pieces, std::memory_order_relaxed);
      uint64_t calls = 0;
      for (const CopyTicket& t : *tickets) calls += t.runtime_calls;
      t_.copy_calls_.fetch_add(calls, std::memory_order_relaxed);
      slots_[slot].tickets = *std::move(tickets);
    }
    t_.copy_s_ += SecondsSince(t0);
    // On error the batch left nothing in flight; the slot is freed by Run.
    in_flight_.push_back(slot);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      SetError(t_.Fail(plan_, item, "copy", st));
      return false;
    }
    return true;
  }

  // The slot's block copied to the device at once and its pieces moved
  // there by a kernel (Device::ScatterToDeviceAsync): one copy call where
  // requests_ would take several (storages 64-byte aligned in device
  // memory from a file packed at 16). Without device memory for the
  // scratch, the load goes on with a copy per request.
  absl::StatusOr<std::vector<CopyTicket>> Scatter(size_t slot, const ReadItem& item) {
    Slot& s = slots_[slot];
    const size_t block_bytes = plan_.max_item_bytes + table_room_;
    if (s.scratch.data() == nullptr) {
      auto scratch = device_.Allocate(block_bytes);
      if (!scratch.ok()) {
        scatter_ = false;
        return device_.CopyManyToDeviceAsync(requests_);
      }
      s.scratch = *std::move(scratch);
    }
    auto* base = static_cast<uint8_t*>(s.buffer.data());
    uint8_t* dst_base = static_cast<uint8_t*>(requests_[0].dst);
    for (const CopyRequest& r : requests_)
      dst_base = std::min(dst_base, static_cast<uint8_t*>(r.dst));
    const size_t table_offset = (static_cast<size_t>(item.nbytes) + alignof(ScatterPiece) - 1) /
                                alignof(ScatterPiece) * alignof(ScatterPiece);
    auto* table = reinterpret_cast<ScatterPiece*>(base + table_offset);
    for (size_t k = 0; k < requests_.size(); ++k) {
      const CopyRequest& r = requests_[k];
      table[k] = ScatterPiece{
          .src_offset = static_cast<uint64_t>(static_cast<const uint8_t*>(r.src) - base),
          .dst_offset = static_cast<uint64_t>(static_cast<uint8_t*>(r.dst) - dst_base),
          .nbytes = r.nbytes};
    }
    return device_.ScatterToDeviceAsync(s.scratch.data(), base,
                                        table_offset + requests_.size() * sizeof(ScatterPiece),
                                        table_offset, requests_.size(), dst_base);
  }

  // Waits on the oldest copy, records its item complete and hands its slot
  // back. False, the error recorded, when either fails.
  bool RetireOldest() {
    const size_t s = in_flight_.front();
    in_flight_.pop_front();
    const ReadItem& item = plan_.items[slots_[s].item];
    absl::Status st = WaitSlot(s);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      SetError(t_.Fail(plan_, item, "wait", st));
      return false;
    }
    st = t_.Complete(plan_, item);
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok()) {
      SetError(std::move(st));
      return false;
    }
    ++completed_;
    free_slots_.push_back(s);
    free_cv_.notify_one();
    return true;
  }

  absl::Status WaitSlot(size_t slot) {
    const auto t0 = Clock::now();
    absl::Status st;
    for (const CopyTicket& t : slots_[slot].tickets) {
      st = device_.Wait(t);
      if (!st.ok()) break;
    }
    slots_[slot].tickets.clear();
    t_.wait_s_ += SecondsSince(t0);
    return st;
  }

  // REQUIRES: mu_ held.
  void SetError(absl::Status st) {
    if (error_.ok()) error_ = std::move(st);
    stop_ = true;
    free_cv_.notify_all();
    filled_cv_.notify_all();
  }

  // A slot whose pieces take at least this many copies is scattered
  // instead (when the device can): below it, the copies cost less than the
  // slot's device scratch (allocated once a slot, for the whole load).
  static constexpr size_t kScatterMinCopies = 16;

  Transfer& t_;
  Device& device_;
  const ReadPlan& plan_;
  bool scatter_;           // The device scatters (the calling thread's).
  size_t table_room_ = 0;  // Bytes a slot keeps for its table when scatter_.
  std::vector<Slot> slots_;

  std::mutex mu_;
  std::condition_variable free_cv_, filled_cv_;
  std::deque<size_t> free_slots_, filled_;  // Guarded by mu_.
  bool stop_ = false;                       // Guarded by mu_.
  absl::Status error_;                      // Guarded by mu_ until the readers are joined.
  std::atomic<size_t> next_{0};

  // The calling thread's.
  std::deque<size_t> in_flight_;
  std::vector<CopyRequest> requests_;
  size_t completed_ = 0;
};

absl::Status Transfer::RunStaged(Device& device, const ReadPlan& plan) {
  if (plan.items.empty()) return absl::OkStatus();
  return StagedRun(*this, device, plan).Run();
}

}  // namespace ptd::internal
