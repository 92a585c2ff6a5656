#include "runtime/loader/transfer.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <new>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"

#include "ptd/rules.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"
#include "runtime/internal/threads.h"

namespace ptd::internal {
namespace {

// The non-empty storages of `which`: those with a file location, in file
// order, and those without, in `which`'s order.
std::pair<std::vector<uint32_t>, std::vector<uint32_t>> SplitByLocation(
    const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which) {
  std::vector<uint32_t> located, unlocated;
  located.reserve(which.size());
  for (uint32_t s : which) {
    if (storages[s].nbytes == 0) continue;
    (storages[s].location ? located : unlocated).push_back(s);
  }
  const auto in_file_order = [&](uint32_t a, uint32_t b) {
    return storages[a].location->offset < storages[b].location->offset;
  };
  // Allocate sorted them already, as a rule: a linear check spares the sort.
  if (!std::is_sorted(located.begin(), located.end(), in_file_order)) {
    std::stable_sort(located.begin(), located.end(), in_file_order);
  }
  return {std::move(located), std::move(unlocated)};
}

// Appends reads to a plan: one storage in chunks, or a group of
// neighbours as one read.
class PlanBuilder {
 public:
  PlanBuilder(const std::vector<StorageJob>& storages, uint64_t max_read, ReadPlan* plan)
      : storages_(storages), max_read_(max_read), plan_(*plan) {}

  // Storage `s` in chunks of up to max_read bytes.
  void AddChunks(uint32_t s) {
    const StorageJob& j = storages_[s];
    for (uint64_t done = 0; done < j.nbytes;) {
      const uint64_t n = std::min(max_read_, j.nbytes - done);
      plan_.items.push_back(ReadItem{.located = j.location.has_value(),
                                     .offset = (j.location ? j.location->offset : 0) + done,
                                     .nbytes = n,
                                     .first_piece = static_cast<uint32_t>(plan_.pieces.size()),
                                     .num_pieces = 1});
      plan_.pieces.push_back(Piece{.storage = s, .dst_offset = done, .src_offset = 0, .nbytes = n});
      plan_.max_item_bytes = std::max(plan_.max_item_bytes, n);
      done += n;
    }
  }

  // Storages `group`, read at once over [begin, end): one storage alone is
  // read in chunks; several are one item whose pieces sit at `at(s)` -
  // begin. Empties `group`.
  template <typename At>
  void Flush(std::vector<uint32_t>& group, uint64_t begin, uint64_t end, bool packed, At at) {
    if (group.size() == 1) {
      AddChunks(group[0]);
    } else if (!group.empty()) {
      plan_.items.push_back(ReadItem{.located = !packed,
                                     .packed = packed,
                                     .offset = begin,
                                     .nbytes = end - begin,
                                     .first_piece = static_cast<uint32_t>(plan_.pieces.size()),
                                     .num_pieces = static_cast<uint32_t>(group.size())});
      for (uint32_t s : group) {
        plan_.pieces.push_back(Piece{.storage = s,
                                     .dst_offset = 0,
                                     .src_offset = at(s) - begin,
                                     .nbytes = storages_[s].nbytes});
      }
      plan_.max_item_bytes = std::max(plan_.max_item_bytes, end - begin);
    }
    group.clear();
  }

 private:
  const std::vector<StorageJob>& storages_;
  uint64_t max_read_;
  ReadPlan& plan_;
};

}  // namespace

ReadPlan PlanReads(const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which,
                   uint64_t max_read, uint64_t pack_limit, uint64_t max_gap) {
  max_read = std::max<uint64_t>(max_read, 1);
  ReadPlan plan;
  // A piece per storage, more only for storages read in several chunks: no
  // growth by doubling (at 65,536 storages a third of the plan's memory).
  plan.pieces.reserve(which.size());
  auto [located, unlocated] = SplitByLocation(storages, which);

  PlanBuilder builder(storages, max_read, &plan);
  const auto add_chunks = [&](uint32_t s) { builder.AddChunks(s); };
  // A run of located storages read at once: [run_begin, run_end).
  std::vector<uint32_t> run;
  uint64_t run_begin = 0, run_end = 0;
  const auto flush = [&] {
    builder.Flush(run, run_begin, run_end, false,
                  [&](uint32_t s) { return storages[s].location->offset; });
  };
  for (uint32_t s : located) {
    const StorageJob& j = storages[s];
    const uint64_t begin = j.location->offset;
    const uint64_t end = begin + j.nbytes;  // Inside the file: no overflow.
    if (j.nbytes > pack_limit) {
      flush();
      add_chunks(s);
      continue;
    }
    if (!run.empty() && begin <= run_end + max_gap &&
        std::max(end, run_end) - run_begin <= max_read) {
      run.push_back(s);
      run_end = std::max(run_end, end);
      continue;
    }
    flush();
    run.push_back(s);
    run_begin = begin;
    run_end = end;
  }
  flush();

  // Storages without a location that share a run (StorageJob::packed_offset,
  // a staging device's): packed into reads of up to max_read at their
  // offsets in the run, so that a slot of them is one copy.
  std::vector<uint32_t> packed;
  uint64_t packed_begin = 0, packed_end = 0;
  const auto flush_packed = [&] {
    builder.Flush(packed, packed_begin, packed_end, true,
                  [&](uint32_t s) { return *storages[s].packed_offset; });
  };
  for (uint32_t s : unlocated) {
    const StorageJob& j = storages[s];
    if (!j.packed_offset || j.nbytes > pack_limit) {
      flush_packed();
      add_chunks(s);
      continue;
    }
    const uint64_t begin = *j.packed_offset;
    if (!packed.empty() && storages[packed.back()].run == j.run && begin >= packed_end &&
        begin + j.nbytes - packed_begin <= max_read) {
      packed.push_back(s);
      packed_end = begin + j.nbytes;
      continue;
    }
    flush_packed();
    packed.push_back(s);
    packed_begin = begin;
    packed_end = begin + j.nbytes;
  }
  flush_packed();
  return plan;
}

ReadPlan PlanAlignedReads(const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which,
                          uint64_t max_read, uint64_t max_gap, uint64_t alignment,
                          uint64_t unlocated_pack_limit) {
  alignment = std::max<uint64_t>(alignment, 1);
  max_read = std::max(alignment, max_read / alignment * alignment);
  auto [located, unlocated] = SplitByLocation(storages, which);
  ReadPlan plan;
  plan.pieces.reserve(located.size());
  const auto down = [&](uint64_t v) { return v / alignment * alignment; };
  const auto up = [&](uint64_t v) { return (v + alignment - 1) / alignment * alignment; };
  // The storages of one group, covered by [begin, end): split into ranges
  // of max_read, each storage into its parts inside them (in file order,
  // so a range's pieces are in the order of their bytes).
  std::vector<uint32_t> group;
  std::vector<std::pair<uint64_t, Piece>> parts;  // (range index, piece)
  const auto flush = [&](uint64_t begin, uint64_t end) {
    if (group.empty()) return;
    parts.clear();
    for (uint32_t s : group) {
      const uint64_t off = storages[s].location->offset;
      const uint64_t stop = off + storages[s].nbytes;
      for (uint64_t at = off; at < stop;) {
        const uint64_t range = (at - begin) / max_read;
        const uint64_t range_end = std::min(end, begin + (range + 1) * max_read);
        const uint64_t n = std::min(stop, range_end) - at;
        parts.emplace_back(range, Piece{.storage = s,
                                        .dst_offset = at - off,
                                        .src_offset = at - (begin + range * max_read),
                                        .nbytes = n});
        at += n;
      }
    }
    std::stable_sort(parts.begin(), parts.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < parts.size();) {
      const uint64_t range = parts[k].first;
      const uint64_t range_begin = begin + range * max_read;
      ReadItem item{.located = true,
                    .aligned = true,
                    .offset = range_begin,
                    .nbytes = std::min(end, range_begin + max_read) - range_begin,
                    .first_piece = static_cast<uint32_t>(plan.pieces.size())};
      for (; k < parts.size() && parts[k].first == range; ++k)
        plan.pieces.push_back(parts[k].second);
      item.num_pieces = static_cast<uint32_t>(plan.pieces.size() - item.first_piece);
      plan.max_item_bytes = std::max(plan.max_item_bytes, item.nbytes);
      plan.items.push_back(item);
    }
    group.clear();
  };
  uint64_t begin = 0, end = 0;
  for (uint32_t s : located) {
    const uint64_t lo = down(storages[s].location->offset);
    const uint64_t hi = up(storages[s].location->offset + storages[s].nbytes);
    // Blocks that touch are read together whatever the gap setting: a
    // block is never read twice.
    if (!group.empty() && lo <= end + down(max_gap)) {
      group.push_back(s);
      end = std::max(end, hi);
      continue;
    }
    flush(begin, end);
    group.push_back(s);
    begin = lo;
    end = hi;
  }
  flush(begin, end);
  if (!unlocated.empty()) {
    ReadPlan rest = PlanReads(storages, unlocated, max_read, unlocated_pack_limit, max_gap);
    const uint32_t shift = static_cast<uint32_t>(plan.pieces.size());
    for (ReadItem item : rest.items) {
      item.first_piece += shift;
      plan.items.push_back(item);
    }
    plan.pieces.insert(plan.pieces.end(), rest.pieces.begin(), rest.pieces.end());
    plan.max_item_bytes = std::max(plan.max_item_bytes, rest.max_item_bytes);
  }
  return plan;
}

ReadPlan SplitPlanAt(const ReadPlan& plan, uint64_t step, uint64_t alignment) {
  ReadPlan out;
  out.items.reserve(plan.items.size());
  out.pieces.reserve(plan.pieces.size());
  for (const ReadItem& item : plan.items) {
    // The cuts inside (offset, offset + nbytes).
    std::vector<uint64_t> cuts{0};
    if (item.located && !item.packed && step != 0) {
      for (uint64_t b = (item.offset / step + 1) * step; b < item.offset + item.nbytes; b += step) {
        if (item.aligned && alignment != 0 && (b - item.offset) % alignment != 0) continue;
        cuts.push_back(b - item.offset);
      }
    }
    cuts.push_back(item.nbytes);
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const uint64_t lo = cuts[c], hi = cuts[c + 1];
      ReadItem part = item;
      part.offset = item.offset + lo;
      part.nbytes = hi - lo;
      part.first_piece = static_cast<uint32_t>(out.pieces.size());
      part.num_pieces = 0;
      for (uint32_t k = 0; k < item.num_pieces; ++k) {
        const Piece& p = plan.pieces[item.first_piece + k];
        const uint64_t a = std::max(p.src_offset, lo);
        const uint64_t b = std::min(p.src_offset + p.nbytes, hi);
        if (a >= b && !(p.nbytes == 0 && p.src_offset >= lo && p.src_offset < hi)) continue;
        out.pieces.push_back(Piece{.storage = p.storage,
                                   .dst_offset = p.dst_offset + (a - p.src_offset),
                                   .src_offset = a - lo,
                                   .nbytes = b > a ? b - a : 0});
        ++part.num_pieces;
      }
      if (part.num_pieces == 0) continue;  // Padding only: nothing to read.
      out.max_item_bytes = std::max(out.max_item_bytes, part.nbytes);
      out.items.push_back(part);
    }
  }
  return out;
}

Transfer::Transfer(const ByteSource& source, ReadEngine& engine, std::vector<StorageJob>* storages,
                   const TransferOptions& options, Clock::time_point start, uint64_t total_bytes)
    : source_(source),
      engine_(engine),
      storages_(*storages),
      options_(options),
      start_(start),
      total_bytes_(total_bytes),
      remaining_(new std::atomic<uint64_t>[storages->size()]) {
  for (size_t i = 0; i < storages_.size(); ++i) remaining_[i] = storages_[i].nbytes;
}

absl::Status Transfer::Fail(const ReadPlan& plan, const ReadItem& item, std::string_view phase,
                            const absl::Status& cause) const {
  const Piece& first = plan.pieces[item.first_piece];
  const StorageJob& j = storages_[first.storage];
  std::string what = absl::StrCat("storage '", internal::Sv(j.key), "' (", j.nbytes, " bytes");
  if (item.num_pieces > 1) {
    absl::StrAppend(&what, ", read with ", item.num_pieces - 1, " neighbouring storage(s)");
  }
  return PrefixStatus(absl::StrCat(what, "): ", internal::Sv(phase), ": "), cause);
}

absl::Status Transfer::Read(const ReadPlan& plan, const ReadItem& item, uint8_t* dst) {
  reads_.fetch_add(item.packed ? item.num_pieces : 1, std::memory_order_relaxed);
  bytes_read_.fetch_add(item.nbytes, std::memory_order_relaxed);
  const auto span = absl::MakeSpan(dst, item.nbytes);
  absl::Status st;
  if (item.located) {
    st = engine_.Read(item.offset, span);
  } else if (item.packed) {
    for (uint32_t k = 0; k < item.num_pieces && st.ok(); ++k) {
      const Piece& p = plan.pieces[item.first_piece + k];
      st = source_.ReadAt(storages_[p.storage].key, 0,
                          absl::MakeSpan(dst + p.src_offset, static_cast<size_t>(p.nbytes)));
      engine_.CountUnlocated(p.nbytes);
    }
  } else {
    const Piece& p = plan.pieces[item.first_piece];
    st = source_.ReadAt(storages_[p.storage].key, item.offset, span);
    engine_.CountUnlocated(item.nbytes);
  }
  if (!st.ok()) return Fail(plan, item, "read", st);
  return absl::OkStatus();
}

void Transfer::MarkFirstComplete() {
  // Called as every storage completes: read the clock for the first only
  // (65,536 clock reads were 2% of a load of 65,536 x 1 KiB).
  if (first_complete_ns_.load(std::memory_order_relaxed) != -1) return;
  int64_t unset = -1;
  first_complete_ns_.compare_exchange_strong(
      unset, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
}

absl::Status Transfer::AddProgress(uint64_t bytes,
                                   absl::FunctionRef<absl::Status(const absl::Status&)> name) {
  if (!options_.progress) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(progress_mu_);
  if (cancelled_) return cancel_status_;
  done_bytes_ += bytes;
  if (!options_.progress(done_bytes_, total_bytes_)) {
    cancel_status_ =
        name(absl::CancelledError(absl::StrCat("the progress callback stopped the load at ",
                                               done_bytes_, " of ", total_bytes_, " bytes")));
    cancelled_ = true;
    return cancel_status_;
  }
  return absl::OkStatus();
}

absl::Status Transfer::Complete(const ReadPlan& plan, const ReadItem& item) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < item.num_pieces; ++i) {
    const Piece& p = plan.pieces[item.first_piece + i];
    bytes += p.nbytes;
    if (remaining_[p.storage].fetch_sub(p.nbytes) == p.nbytes) MarkFirstComplete();
  }
  return AddProgress(
      bytes, [&](const absl::Status& cause) { return Fail(plan, item, "cancelled", cause); });
}

absl::Status Transfer::CompleteMapped(absl::Span<const uint32_t> which) {
  if (which.empty()) return absl::OkStatus();
  uint64_t bytes = 0;
  for (uint32_t s : which) {
    bytes += storages_[s].nbytes;
    remaining_[s] = 0;
  }
  MarkFirstComplete();
  return AddProgress(bytes, [&](const absl::Status& cause) {
    return PrefixStatus(absl::StrCat(which.size(), " mapped storage(s) from '",
                                     internal::Sv(storages_[which[0]].key), "': cancelled: "),
                        cause);
  });
}

absl::Status Transfer::Prepare(Device& device, const ReadPlan& plan, const ReadItem& item) {
  // One call per run of destinations that follow each other with less than
  // a page between them (so every page of the run overlaps a destination):
  // one call for a packed read of neighbouring storages.
  constexpr uint64_t kPage = 4096;
  uint8_t* lo = nullptr;
  uint8_t* hi = nullptr;
  const auto flush = [&]() -> absl::Status {
    if (lo == hi) return absl::OkStatus();
    absl::Status st = device.PrepareWrite(lo, static_cast<size_t>(hi - lo));
    if (!st.ok()) return Fail(plan, item, "prepare", st);
    return absl::OkStatus();
  };
  for (uint32_t k = 0; k < item.num_pieces; ++k) {
    const Piece& p = plan.pieces[item.first_piece + k];
    if (p.nbytes == 0) continue;
    uint8_t* begin = storages_[p.storage].dest + p.dst_offset;
    if (lo == hi || begin < hi || static_cast<uint64_t>(begin - hi) >= kPage) {
      PTD_RETURN_IF_ERROR(flush());
      lo = begin;
    }
    hi = begin + p.nbytes;
  }
  return flush();
}

bool Transfer::DestinationsFollowSource(const ReadPlan& plan, const ReadItem& item,
                                        const uint8_t* first_dest) const {
  uint64_t src = 0;
  const uint8_t* dst = first_dest;
  bool back_to_back = true;
  for (uint32_t k = 0; k < item.num_pieces && back_to_back; ++k) {
    const Piece& p = plan.pieces[item.first_piece + k];
    back_to_back = p.src_offset == src && storages_[p.storage].dest + p.dst_offset == dst;
    src += p.nbytes;
    dst += p.nbytes;
  }
  if (back_to_back && src == item.nbytes) return true;
  // Or the pieces are of one run (AllocateList's FileRuns: mapped host
  // memory laid out as the file), each as far from the first in memory as
  // in the file: the padding between them is the run's own.
  const uint32_t run = storages_[plan.pieces[item.first_piece].storage].run;
  if (run == StorageJob::kNoRun) return false;
  for (uint32_t k = 0; k < item.num_pieces; ++k) {
    const Piece& p = plan.pieces[item.first_piece + k];
    const StorageJob& j = storages_[p.storage];
    if (j.run != run || j.dest + p.dst_offset != first_dest + p.src_offset) return false;
  }
  const Piece& last = plan.pieces[item.first_piece + item.num_pieces - 1];
  return last.src_offset + last.nbytes == item.nbytes;
}

namespace {
// Cache-line alignment suffices for buffered reads; a direct read into
// scratch wants the read engine's block alignment.
constexpr size_t kScratchAlignment = ReadEngine::kAlignment;
// A packed read whose destinations do not follow the file goes through
// scratch this much at a time (whole pieces; a larger piece alone): a
// reader thread holds 1 MiB of scratch, not a whole packed read (4 MiB by
// default, on each of LoadOptions::threads threads), and the bytes are
// copied out while they are still in cache.
constexpr uint64_t kScratchBytes = uint64_t{1} << 20;
}  // namespace

// A reader's buffer for reads that do not land in their destinations
// (packed reads of at most max_read_bytes, whole aligned blocks): grown as
// needed, reused read after read, and aligned: the kernel copies into a destination 16 bytes off
// one (malloc's alignment) about 4x slower on some CPUs (measured here,
// AMD EPYC: 4 MiB preads from the page cache into a reused buffer, 8 ms
// per 64 MiB at offsets 0, 64 or 4096, 32-44 ms at 16).
class Transfer::Scratch {
 public:
  uint8_t* Get(uint64_t n) {
    if (size_ < n) {
      block_.reset();  // The old one first: one buffer at a time.
      block_.reset(static_cast<uint8_t*>(
          ::operator new[](static_cast<size_t>(n), std::align_val_t{kScratchAlignment})));
      size_ = static_cast<size_t>(n);
    }
    return block_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const {
      ::operator delete[](p, std::align_val_t{kScratchAlignment});
    }
  };
  std::unique_ptr<uint8_t, Free> block_;
  size_t size_ = 0;
};

absl::Status Transfer::ReadIntoDestinations(const ReadPlan& plan, const ReadItem& item,
                                            Scratch& scratch) {
  const Piece& first = plan.pieces[item.first_piece];
  if (item.aligned) {
    // Whole blocks, at once: into the aligned scratch, then to each
    // destination (a direct read never lands in a destination that is
    // not laid out as the file's blocks).
    uint8_t* const buf = scratch.Get(item.nbytes);
    PTD_RETURN_IF_ERROR(Read(plan, item, buf));
    bytes_via_scratch_.fetch_add(item.nbytes, std::memory_order_relaxed);
    for (uint32_t k = 0; k < item.num_pieces; ++k) {
      const Piece& p = plan.pieces[item.first_piece + k];
      std::memcpy(storages_[p.storage].dest + p.dst_offset, buf + p.src_offset, p.nbytes);
    }
    return absl::OkStatus();
  }
  uint8_t* const first_dest = storages_[first.storage].dest + first.dst_offset;
  if (first.src_offset == 0 && DestinationsFollowSource(plan, item, first_dest)) {
    // One storage, or neighbours whose destinations lie back to back
    // as their bytes do in the file (a host device packs small buffers
    // so): straight into them, no scratch and no copy.
    return Read(plan, item, first_dest);
  }
  // Pieces lie in the order of their bytes in the file (overlapping
  // ones included): [a, b) spans [lo, hi) of the item.
  uint64_t prev_hi = 0;
  for (uint32_t a = 0; a < item.num_pieces;) {
    const Piece& pa = plan.pieces[item.first_piece + a];
    // A signed load hashes what it reads: the parts then cover the
    // item back to back, padding included, as the hasher expects.
    const uint64_t lo = hasher_ != nullptr ? std::min(prev_hi, pa.src_offset) : pa.src_offset;
    uint64_t hi = pa.src_offset + pa.nbytes;
    uint32_t b = a + 1;
    for (; b < item.num_pieces; ++b) {
      const Piece& pb = plan.pieces[item.first_piece + b];
      const uint64_t end = std::max(hi, pb.src_offset + pb.nbytes);
      if (end - lo > kScratchBytes) break;
      hi = end;
    }
    uint8_t* const buf = scratch.Get(hi - lo);
    const ReadItem part{.located = item.located,
                        .offset = item.offset + lo,
                        .nbytes = hi - lo,
                        .first_piece = item.first_piece + a,
                        .num_pieces = b - a};
    PTD_RETURN_IF_ERROR(Read(plan, part, buf));
    bytes_via_scratch_.fetch_add(part.nbytes, std::memory_order_relaxed);
    for (uint32_t k = a; k < b; ++k) {
      const Piece& p = plan.pieces[item.first_piece + k];
      std::memcpy(storages_[p.storage].dest + p.dst_offset, buf + (p.src_offset - lo), p.nbytes);
    }
    prev_hi = hi;
    a = b;
  }
  return absl::OkStatus();
}

absl::Status Transfer::RunDirect(Device& device, const ReadPlan& plan) {
  if (plan.items.empty()) return absl::OkStatus();
  // The items a thread takes at once: one, or with a "shards" hasher, those
  // of one shard (in file order, so that it hashes them as it reads them).
  std::vector<size_t> groups{0};
  for (size_t i = 1; i < plan.items.size(); ++i) {
    const ReadItem& a = plan.items[i - 1];
    const ReadItem& b = plan.items[i];
    if (hasher_ == nullptr || !hasher_->sharded() || !a.located || !b.located ||
        hasher_->StreamOf(a.offset) != hasher_->StreamOf(b.offset)) {
      groups.push_back(i);
    }
  }
  groups.push_back(plan.items.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  absl::Status error;
  const auto work = [&] {
    Scratch scratch;
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t g = next.fetch_add(1);
      if (g + 1 >= groups.size()) return;
      for (size_t i = groups[g]; i < groups[g + 1] && !stop.load(std::memory_order_relaxed); ++i) {
        const ReadItem& item = plan.items[i];
        absl::Status st = Prepare(device, plan, item);
        if (st.ok()) st = ReadIntoDestinations(plan, item, scratch);
        if (st.ok()) st = Complete(plan, item);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = st;
          stop = true;
          if (hasher_ != nullptr) hasher_->Abort();
          return;
        }
      }
    }
  };
  // Direct reads wait on the disk, not on a core: more of them in flight.
  const bool direct = engine_.may_read_direct();
  const size_t readers =
      std::min(std::max<size_t>(1, options_.threads) * (direct ? kDirectReadersPerThread : 1),
               groups.size() - 1);
  if (direct) engine_.NoteDirectReaders(readers);
  RunOnThreads(readers, work);
  return error;
}

absl::Status Transfer::RunGds(Device& device, const ReadPlan& plan) {
  if (plan.items.empty()) return absl::OkStatus();
  std::vector<uint8_t> done(plan.items.size(), 0);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  absl::Status error;  // A cancellation or a file that shrank: the load fails.
  const auto read_item = [&](const ReadItem& item) -> absl::Status {
    if (!item.located) return absl::FailedPreconditionError("a storage without a file location");
    // Runs of pieces that lie in device memory as in the file: one read each.
    for (uint32_t a = 0; a < item.num_pieces;) {
      const Piece& pa = plan.pieces[item.first_piece + a];
      uint8_t* const dst = storages_[pa.storage].dest + pa.dst_offset;
      uint64_t end = pa.src_offset + pa.nbytes;
      uint32_t b = a + 1;
      for (; b < item.num_pieces; ++b) {
        const Piece& pb = plan.pieces[item.first_piece + b];
        const StorageJob& j = storages_[pb.storage];
        if (j.run == StorageJob::kNoRun || j.run != storages_[pa.storage].run ||
            pb.src_offset < end ||
            j.dest + pb.dst_offset != dst + (pb.src_offset - pa.src_offset)) {
          break;
        }
        end = pb.src_offset + pb.nbytes;
      }
      reads_.fetch_add(1, std::memory_order_relaxed);
      bytes_read_.fetch_add(end - pa.src_offset, std::memory_order_relaxed);
      PTD_RETURN_IF_ERROR(engine_.ReadToDevice(item.offset + pa.src_offset, dst,
                                               static_cast<size_t>(end - pa.src_offset)));
      a = b;
    }
    return absl::OkStatus();
  };
  const auto work = [&] {
    while (!stop.load(std::memory_order_relaxed) && engine_.gds() != nullptr) {
      const size_t i = next.fetch_add(1);
      if (i >= plan.items.size()) return;
      const ReadItem& item = plan.items[i];
      absl::Status st = read_item(item);
      if (!st.ok() && !absl::IsDataLoss(st)) {
        // The device reader failed: this item and the rest go staged.
        engine_.GdsFailed(st);
        return;
      }
      if (st.ok()) st = Complete(plan, item);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.ok()) error = absl::IsDataLoss(st) ? Fail(plan, item, "read", st) : st;
        stop = true;
        return;
      }
      done[i] = 1;
    }
  };
  RunOnThreads(std::min(options_.threads, plan.items.size()), work);
  PTD_RETURN_IF_ERROR(error);
  if (std::find(done.begin(), done.end(), 0) == done.end()) return absl::OkStatus();
  ReadPlan rest{.pieces = plan.pieces, .max_item_bytes = plan.max_item_bytes};
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (!done[i]) rest.items.push_back(plan.items[i]);
  }
  return RunStaged(device, rest);
}

void Transfer::AddTo(LoadStats* stats, LoadTimings* timings) const {
  stats->reads += reads_.load();
  stats->bytes_read += bytes_read_.load();
  stats->copies += copies_.load();
  stats->copy_calls += copy_calls_.load();
  stats->bytes_via_scratch += bytes_via_scratch_.load();
  timings->copy_s += copy_s_;
  timings->wait_s += wait_s_;
}

std::optional<double> Transfer::first_complete_s() const {
  const int64_t ns = first_complete_ns_.load();
  if (ns < 0) return std::nullopt;
  return static_cast<double>(ns) * 1e-9;
}

namespace {

// Reads of at most this many bytes each are packed with their neighbours on
// the direct path (up to LoadOptions::max_read_bytes a read).
constexpr uint64_t kHostPackLimit = uint64_t{256} << 10;

// The read plan of `which`: for direct reads, neighbours of up to
// kHostPackLimit bytes packed into reads of up to max_read_bytes; staged,
// every read fits a ring slot.
ReadPlan PlanReadsFor(const std::vector<StorageJob>& storages, absl::Span<const uint32_t> which,
                      bool staged, const TransferOptions& options, const ReadEngine& engine) {
  const uint64_t slot = std::max<uint64_t>(1, options.ring_slot_bytes);
  const uint64_t max_read = staged ? slot : options.max_read_bytes;
  const uint64_t pack_limit =
      staged ? slot : std::min<uint64_t>(kHostPackLimit, options.max_read_bytes);
  // Aligned ranges fit a ring slot: its size rounded down to the block
  // (a slot below one block gets one block).
  if (engine.aligned()) {
    return PlanAlignedReads(storages, which, max_read, options.max_gap_bytes,
                            ReadEngine::kAlignment, pack_limit);
  }
  return PlanReads(storages, which, max_read, pack_limit, options.max_gap_bytes);
}

// A signed load hashes the .ptd on the reads of its one plan; a load of
// several plans run one after another (a device budget, host_fqns,
// mapped blocks) has the hasher read the file after it instead, as a
// stream could wait on bytes of a plan that has not started. The hasher of
// a signed load; null for one that is not.
std::unique_ptr<SignedFileHasher> StartHasher(SignedLoad* signed_load, const PlacedStorages& placed,
                                              ReadEngine& engine, Transfer& transfer) {
  if (signed_load == nullptr) return nullptr;
  auto hasher = std::make_unique<SignedFileHasher>(*signed_load->signature, *signed_load->entry,
                                                   *signed_load->file);
  const size_t plans = (placed.to_device.empty() ? 0 : 1) + placed.mapped_blocks.size() +
                       (placed.to_host.empty() ? 0 : 1);
  signed_load->report->one_pass = plans == 1;
  if (plans == 0) {
    signed_load->report->one_pass_note =
        "the load reads none of the .ptd's bytes itself (its storages are mapped, or none is "
        "loaded): the hasher read the file";
  }
  if (plans <= 1) {
    engine.set_hasher(hasher.get());
    transfer.set_hasher(hasher.get());
    if (engine.gds() != nullptr) {
      engine.GdsFailed(absl::FailedPreconditionError(
          "a signed load hashes the bytes as they are read, and GPUDirect Storage reads them "
          "past the host"));
    }
  } else {
    signed_load->report->one_pass_note =
        "the load runs several plans (a device budget, host_fqns or mapped blocks): the .ptd "
        "was hashed after it";
  }
  return hasher;
}

// Mapped host memory, block by block, straight into it as into host
// memory: block k + 1 is allocated (pinned) while block k is read.
absl::Status RunMappedBlocks(Device& device, std::vector<StorageJob>* storages,
                             PlacedStorages* placed, LoadStats* stats,
                             absl::FunctionRef<absl::Status(absl::Span<const uint32_t>)> run) {
  const size_t n = placed->mapped_blocks.size();
  for (size_t k = 0; k < n; ++k) {
    std::future<absl::Status> next;
    if (k + 1 < n) {
      try {
        next = std::async(std::launch::async, [&, k] {
          return AllocateMappedBlock(device, k + 1, storages, placed, stats);
        });
      } catch (const std::system_error&) {
        // No thread: pinned after this block's reads instead.
      }
    }
    const absl::Status read = run(placed->mapped_blocks[k]);
    absl::Status pinned;
    if (next.valid()) {
      pinned = next.get();
    } else if (k + 1 < n && read.ok()) {
      pinned = AllocateMappedBlock(device, k + 1, storages, placed, stats);
    }
    PTD_RETURN_IF_ERROR(read);
    PTD_RETURN_IF_ERROR(pinned);
  }
  return absl::OkStatus();
}

// The .ptd's digests, and what the load did not read (A5), into `report`.
absl::Status FinishHasher(SignedFileHasher& hasher, size_t threads, SignatureReport& report) {
  const absl::Status signed_st = hasher.Finish(threads);
  for (SignatureReport::File& f : report.files) {
    if (f.read != "load") continue;
    f.ok = signed_st.ok();
    if (!signed_st.ok()) f.error = std::string(signed_st.message());
  }
  if (!signed_st.ok()) return report.Fail(signed_st);
  report.verified = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status TransferStorages(const ByteSource& source, Device& device,
                              const TransferOptions& options, Transfer::Clock::time_point start,
                              uint64_t total_bytes, std::vector<StorageJob>* storages,
                              PlacedStorages* placed, LoadStats* stats, LoadTimings* timings,
                              std::optional<double>* first_complete_s, SignedLoad* signed_load) {
  const auto read_t0 = Transfer::Clock::now();
  ReadEngine engine(source, options.io, device);
  Transfer transfer(source, engine, storages, options, start, total_bytes);
  std::unique_ptr<SignedFileHasher> hasher = StartHasher(signed_load, *placed, engine, transfer);
  const auto run = [&](Device& dev, absl::Span<const uint32_t> which, bool staged) {
    if (which.empty()) return absl::OkStatus();
    ReadPlan plan = PlanReadsFor(*storages, which, staged, options, engine);
    if (signed_load != nullptr && signed_load->report->one_pass) {
      if (signed_load->signature->sharded()) {
        plan = SplitPlanAt(plan, signed_load->signature->shard_size(), ReadEngine::kAlignment);
      }
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      for (const ReadItem& item : plan.items) {
        if (item.located) ranges.emplace_back(item.offset, item.offset + item.nbytes);
      }
      hasher->ExpectReads(std::move(ranges));
    }
    absl::Status st = staged ? transfer.RunStaged(dev, plan) : transfer.RunDirect(dev, plan);
    if (!st.ok() && hasher != nullptr) hasher->Abort();
    return st;
  };
  const auto device_part = [&]() -> absl::Status {
    if (engine.gds() != nullptr && !placed->to_device.empty()) {
      // GPUDirect Storage: the device's storages straight from the file.
      return transfer.RunGds(device,
                             PlanReadsFor(*storages, placed->to_device, true, options, engine));
    }
    return run(device, placed->to_device, !device.host_accessible());
  };
  const auto mapped_part = [&]() -> absl::Status {
    return RunMappedBlocks(device, storages, placed, stats, [&](absl::Span<const uint32_t> which) {
      return run(device, which, false);
    });
  };
  absl::Status st = transfer.CompleteMapped(placed->file_mapped);
  if (st.ok() && !placed->to_device.empty() && !placed->mapped_blocks.empty()) {
    // A budgeted load: the device's part (reads and copies) and the mapped
    // part (reads into pinned memory) at once; each has its own threads.
    absl::Status device_st;
    std::thread device_thread;
    try {
      device_thread = std::thread([&] { device_st = device_part(); });
    } catch (const std::system_error&) {
      device_st = device_part();
    }
    const absl::Status mapped_st = mapped_part();
    if (device_thread.joinable()) device_thread.join();
    st = !device_st.ok() ? device_st : mapped_st;
  } else {
    if (st.ok()) st = device_part();
    if (st.ok()) st = mapped_part();
  }
  if (st.ok() && !placed->to_host.empty()) st = run(*placed->host_device, placed->to_host, false);
  PTD_RETURN_IF_ERROR(st);
  if (hasher != nullptr)
    PTD_RETURN_IF_ERROR(FinishHasher(*hasher, options.threads, *signed_load->report));
  timings->read_s = SecondsSince(read_t0);
  transfer.AddTo(stats, timings);
  stats->io = engine.Report();
  *first_complete_s = transfer.first_complete_s();
  return absl::OkStatus();
}

}  // namespace ptd::internal
