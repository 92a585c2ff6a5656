#include "ptd/host_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

#include "runtime/device/buddyinfo.h"
#include "runtime/internal/checked_math.h"
#include "runtime/internal/status_macros.h"

namespace ptd {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack it.
#endif

HugePageMode ReadHugePageMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return HugePageMode::kUnknown;
  if (line.find("[always]") != std::string::npos) return HugePageMode::kAlways;
  if (line.find("[madvise]") != std::string::npos) return HugePageMode::kMadvise;
  if (line.find("[never]") != std::string::npos) return HugePageMode::kNever;
  return HugePageMode::kUnknown;
}

// Whether madvise(MADV_POPULATE_WRITE) works here; cleared at the first
// EINVAL (a kernel before 5.14), so that later calls skip the syscall.
std::atomic<bool> populate_write_works{true};

// Faults in the pages of [p, p + n) for writing without changing a byte:
// MADV_POPULATE_WRITE over every page the range touches; without it, one
// write of 0 per page that lies wholly inside the range (its bytes are the
// caller's to overwrite; a page shared with a neighbour may be being written
// by another thread). False when the memory is not there (ENOMEM): the
// caller fails the allocation or the read instead of meeting the OOM killer
// in the reads.
bool Prefault(uint8_t* p, size_t n) {
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + n;
  if (populate_write_works.load(std::memory_order_relaxed)) {
    const uintptr_t lo = begin / kPage * kPage;
    const uintptr_t hi = (end + kPage - 1) / kPage * kPage;
    if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) == 0) return true;
    if (errno != EINVAL) return false;
    populate_write_works.store(false, std::memory_order_relaxed);
  }
  for (uintptr_t page = (begin + kPage - 1) / kPage * kPage; page + kPage <= end; page += kPage) {
    *reinterpret_cast<volatile uint8_t*>(page) = 0;
  }
  return true;
}

// Prefaults on up to `threads` threads, in huge-page-aligned pieces.
bool PrefaultParallel(uint8_t* p, size_t n, size_t threads) {
  const size_t pages = (n + kHugePage - 1) / kHugePage;
  threads = std::max<size_t>(1, std::min({threads, pages, size_t{16}}));
  const size_t per = (pages + threads - 1) / threads * kHugePage;
  std::vector<std::thread> workers;
  std::vector<char> ok(threads, 1);
  for (size_t t = 1; t < threads; ++t) {
    const size_t begin = t * per;
    if (begin >= n) break;
    workers.emplace_back(
        [&ok, t, q = p + begin, m = std::min(per, n - begin)] { ok[t] = Prefault(q, m) ? 1 : 0; });
  }
  ok[0] = Prefault(p, std::min(per, n)) ? 1 : 0;
  for (std::thread& w : workers) w.join();
  return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
}

}  // namespace

HugePageMode SystemHugePageMode() {
  static const HugePageMode mode = ReadHugePageMode();
  return mode;
}

bool HugePageFaultsMayCompact() {
  static const bool compacts = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/defrag");
    std::string line;
    if (!std::getline(in, line)) return true;
    return !(line.find("[defer]") != std::string::npos ||
             line.find("[never]") != std::string::npos);
  }();
  return compacts;
}

namespace {

// A PMD-sized huge page: its size and its order, log2(size / page size);
// order -1 where it cannot be read.
const std::pair<uint64_t, int>& HugePageSizeAndOrder() {
  static const std::pair<uint64_t, int> huge_page = []() -> std::pair<uint64_t, int> {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    uint64_t huge = 0;
    const long page = ::sysconf(_SC_PAGESIZE);
    if (!(in >> huge) || page <= 0 || huge < static_cast<uint64_t>(page)) return {0, -1};
    int k = 0;
    while ((static_cast<uint64_t>(page) << k) < huge && k < 40) ++k;
    return {huge, (static_cast<uint64_t>(page) << k) == huge ? k : -1};
  }();
  return huge_page;
}

}  // namespace

std::optional<int> FreePageReportingOrder() {
  static const std::optional<int> order = []() -> std::optional<int> {
    std::ifstream in("/sys/module/page_reporting/parameters/page_reporting_order");
    int64_t value = -1;
    // Unset until a reporting device registers: -1, or 2^32 - 1 as the
    // kernel prints its unsigned parameter.
    if (!(in >> value) || value < 0 || value > 64) return std::nullopt;
    return static_cast<int>(value);
  }();
  return order;
}

bool FreeHugePagesAreReported() {
  const std::optional<int> reporting = FreePageReportingOrder();
  const int huge_order = HugePageSizeAndOrder().second;
  return reporting.has_value() && (huge_order < 0 || *reporting <= huge_order);
}

std::optional<uint64_t> FreeHugePageBytes() {
  const std::pair<uint64_t, int>& huge_page = HugePageSizeAndOrder();
  if (huge_page.second < 0) return std::nullopt;
  std::ifstream in("/proc/buddyinfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  const std::optional<uint64_t> blocks = internal::FreeBlocksOfOrder(text.str(), huge_page.second);
  if (!blocks || *blocks > UINT64_MAX / huge_page.first) return std::nullopt;
  return *blocks * huge_page.first;
}

std::optional<uint64_t> MemAvailableBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return std::nullopt;
  char line[256];
  std::optional<uint64_t> out;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long kib = 0;  // NOLINT(runtime/int): sscanf's type.
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      if (kib <= std::numeric_limits<uint64_t>::max() / 1024) out = uint64_t{kib} * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
}

bool UsesHugePages(const HostMemoryOptions& options, size_t nbytes) {
  const HugePageMode mode = SystemHugePageMode();
  const bool thp = mode == HugePageMode::kAlways || mode == HugePageMode::kMadvise;
  switch (options.huge_pages) {
    case HugePages::kOff:
      return false;
    case HugePages::kOn:
      return thp;
    case HugePages::kAuto: {
      if (!thp) return false;
      // Free blocks of a huge page or more are handed back to the
      // hypervisor (free page reporting, as under Firecracker's balloon):
      // a huge page comes from exactly those, and its first touch waits for
      // the hypervisor to back it again, where 4 KiB pages mostly come from
      // smaller free blocks that were never handed back.
      if (FreeHugePagesAreReported()) return false;
      if (!HugePageFaultsMayCompact()) return true;
      // A huge-page fault that finds a free block of its order takes it;
      // only one that finds none compacts. Ask for twice the block's bytes
      // free in such blocks, as other processes allocate too.
      const std::optional<uint64_t> free_bytes = FreeHugePageBytes();
      return free_bytes.has_value() && *free_bytes / 2 >= nbytes;
    }
  }
  return false;
}

// A block readied by PrepareAllocation, and the thread that faults it in.
struct HostDevice::Prepared {
  uint8_t* base = nullptr;  // Null once taken.
  size_t size = 0;
  bool huge = false;
  std::atomic<bool> stop{false};
  std::atomic<size_t> faulted{0};  // Bytes from `base` its thread faulted in.
  std::thread thread;

  void Stop() {
    stop.store(true, std::memory_order_relaxed);
    if (thread.joinable()) thread.join();
  }
  ~Prepared() {
    Stop();
    if (base != nullptr) ::munmap(base, size);
  }
};

HostDevice::HostDevice(HostMemoryOptions options) : options_(options) {}

HostDevice::~HostDevice() = default;

uint8_t* HostDevice::MapBlock(size_t size, bool* huge) {
  *huge = false;
  // Over-map by 2 MiB, then trim both ends, so that every huge page of the
  // block can be one.
  if (size + kHugePage < size) return nullptr;
  void* raw =
      ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto* start = static_cast<uint8_t*>(raw);
  auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(start) + kHugePage - 1) /
                                             kHugePage * kHugePage);
  if (aligned > start) ::munmap(start, static_cast<size_t>(aligned - start));
  const size_t tail = static_cast<size_t>((start + size + kHugePage) - (aligned + size));
  if (tail > 0) ::munmap(aligned + size, tail);
  // Advice: failure is harmless. kOff keeps 4 KiB pages where THP is
  // "always" too.
  if (UsesHugePages(options_, size)) {
    *huge = ::madvise(aligned, size, MADV_HUGEPAGE) == 0;
  } else if (options_.huge_pages == HugePages::kOff) {
    (void)::madvise(aligned, size, MADV_NOHUGEPAGE);
  }
  return aligned;
}

void HostDevice::PrepareAllocation(uint64_t bytes) {
  std::unique_ptr<Prepared> fresh;
  // Its thread's writes fault pages in where MADV_POPULATE_WRITE would
  // report ENOMEM: only when the machine has twice the block free.
  const auto fits = [bytes] {
    const std::optional<uint64_t> available = MemAvailableBytes();
    return available.has_value() && *available / 2 >= bytes;
  };
  if (bytes > 0 && options_.populate == Populate::kBeforeWrite &&
      bytes >= options_.huge_min_bytes && bytes <= SIZE_MAX - 2 * kHugePage && fits()) {
    const size_t size = (static_cast<size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
    bool huge = false;
    if (uint8_t* base = MapBlock(size, &huge)) {
      fresh = std::make_unique<Prepared>();
      fresh->base = base;
      fresh->size = size;
      fresh->huge = huge;
      Prepared* p = fresh.get();
      try {
        p->thread = std::thread([p] {
          // At the process's own priority: TakePrepared waits for this
          // thread to see `stop`, so it must get a core when it asks, which
          // SCHED_IDLE or a high nice value would not promise on a busy
          // machine (and measured no faster here). Small steps, so that it
          // sees `stop` soon.
          //
          // A write per page, not MADV_POPULATE_WRITE: a fault takes only
          // the block's own lock, where the madvise holds the process's
          // memory map and stalls every mmap and munmap of the verifying
          // threads (it made the verification 2.4x slower). The block is
          // not handed out yet: its bytes are zeros, and zeros are written.
          constexpr size_t kPage = 4096, kStep = size_t{64} << 10;
          for (size_t at = 0; at < p->size && !p->stop.load(std::memory_order_relaxed);
               at += kStep) {
            for (size_t page = at; page < at + kStep; page += kPage) {
              *reinterpret_cast<volatile uint8_t*>(p->base + page) = 0;
            }
            p->faulted.store(at + kStep, std::memory_order_release);
          }
        });
      } catch (const std::system_error&) {
        // No thread: the block is still mapped, the reads fault it in.
      }
    }
  }
  std::unique_ptr<Prepared> old;
  {
    std::lock_guard<std::mutex> lock(prepared_mu_);
    old = std::move(prepared_);
    prepared_ = std::move(fresh);
  }
  // `old` (stopped and unmapped) goes here, outside the lock.
}

std::shared_ptr<void> HostDevice::TakePrepared(size_t size) {
  std::unique_ptr<Prepared> p;
  {
    std::lock_guard<std::mutex> lock(prepared_mu_);
    p = std::move(prepared_);
  }
  if (p == nullptr) return nullptr;
  p->Stop();
  if (p->size < size) return nullptr;  // Too small: unmapped with `p`.
  if (p->size > size) ::munmap(p->base + size, p->size - size);
  uint8_t* base = std::exchange(p->base, nullptr);
  if (p->huge) counters_->huge_page_bytes.fetch_add(size, std::memory_order_relaxed);
  counters_->prepared_bytes.fetch_add(size, std::memory_order_relaxed);
  // PrepareWrite skips what the thread faulted in (the madvise would walk
  // those pages again: 2-3% of a load of 65,536 x 1 KiB).
  const auto lo = reinterpret_cast<uintptr_t>(base);
  const size_t faulted = std::min(size, p->faulted.load(std::memory_order_acquire));
  {
    std::lock_guard<std::mutex> lock(resident_->mu);
    resident_->lo = lo;
    resident_->hi = lo + faulted;
  }
  return std::shared_ptr<void>(base, [size, resident = resident_](void* q) {
    {
      std::lock_guard<std::mutex> lock(resident->mu);
      if (resident->lo == reinterpret_cast<uintptr_t>(q)) resident->lo = resident->hi = 0;
    }
    ::munmap(q, size);
  });
}

std::shared_ptr<void> HostDevice::AllocateManyBlock(size_t total) {
  if (total < options_.huge_min_bytes) {
    // aligned_alloc wants a multiple of the alignment.
    const std::optional<uint64_t> rounded = internal::AlignUp(total, kDeviceAlignment);
    if (!rounded || *rounded > SIZE_MAX) return nullptr;
    void* p = std::aligned_alloc(kDeviceAlignment, static_cast<size_t>(*rounded));
    if (p == nullptr) return nullptr;
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  const size_t size = (total + kHugePage - 1) / kHugePage * kHugePage;
  if (size < total) return nullptr;
  if (std::shared_ptr<void> prepared = TakePrepared(size)) return prepared;
  bool huge = false;
  uint8_t* aligned = MapBlock(size, &huge);
  if (aligned == nullptr) return nullptr;
  if (huge) counters_->huge_page_bytes.fetch_add(size, std::memory_order_relaxed);
  if (options_.populate == Populate::kOnAllocate &&
      !PrefaultParallel(aligned, size, options_.populate_threads)) {
    ::munmap(aligned, size);
    return nullptr;
  }
  return std::shared_ptr<void>(aligned, [size](void* q) { ::munmap(q, size); });
}

absl::StatusOr<std::shared_ptr<void>> HostDevice::AllocateBlock(size_t nbytes, bool staging) {
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
  return block;
}

absl::StatusOr<DeviceBuffer> HostDevice::Allocate(size_t nbytes) {
  PTD_ASSIGN_OR_RETURN(std::shared_ptr<void> block, AllocateBlock(nbytes, /*staging=*/false));
  void* p = block.get();
  return DeviceBuffer(std::move(block), p, nbytes);
}

absl::StatusOr<std::vector<DeviceBuffer>> HostDevice::AllocateMany(absl::Span<const size_t> sizes) {
  std::vector<DeviceBuffer> out;
  if (sizes.empty()) return out;
  // Each buffer at a multiple of kHostAlignment; a zero-byte one still gets
  // a distinct address.
  std::vector<size_t> offsets(sizes.size());
  size_t total = 0, data_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::optional<uint64_t> rounded =
        internal::AlignUp(std::max<size_t>(sizes[i], 1), kHostAlignment);
    const std::optional<uint64_t> end =
        rounded ? internal::CheckedAdd(total, *rounded) : std::nullopt;
    if (!end || *end > SIZE_MAX) {
      absl::Status s = absl::ResourceExhaustedError(
          absl::StrCat("host: buffer ", i, " of ", sizes.size(), " (", sizes[i],
                       " bytes) takes the total past the address space"));
      s.SetPayload(kAllocateManyIndexPayload, absl::Cord(std::to_string(i)));
      return s;
    }
    offsets[i] = total;
    total = static_cast<size_t>(*end);
    data_bytes += sizes[i];
  }
  std::shared_ptr<void> memory = AllocateManyBlock(total);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host: out of memory allocating ",
                                                     sizes.size(), " buffers (", total, " bytes)"));
  }
  auto* base = static_cast<uint8_t*>(memory.get());
  const uint64_t count = sizes.size();
  Counters& c = *counters_;
  c.allocations.fetch_add(count, std::memory_order_relaxed);
  c.allocated_bytes.fetch_add(data_bytes, std::memory_order_relaxed);
  c.live_allocations.fetch_add(count, std::memory_order_relaxed);
  c.live_bytes.fetch_add(data_bytes, std::memory_order_relaxed);
  std::shared_ptr<void> block(
      base, [memory = std::move(memory), counters = counters_, count, data_bytes](void*) mutable {
        memory.reset();
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

absl::Status HostDevice::PrepareWrite(void* p, size_t n) {
  if (options_.populate != Populate::kBeforeWrite || n == 0) return absl::OkStatus();
  // Less what a prepared block's thread faulted in already: [lo, hi).
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  uintptr_t end = begin + n;
  {
    std::lock_guard<std::mutex> lock(resident_->mu);
    if (begin >= resident_->lo && begin < resident_->hi) begin = std::min(end, resident_->hi);
  }
  if (begin == end) return absl::OkStatus();
  p = reinterpret_cast<void*>(begin);
  n = end - begin;
  if (!Prefault(static_cast<uint8_t*>(p), n)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host: out of memory faulting in ", n, " bytes to write"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostBuffer> HostDevice::AllocateStaging(size_t nbytes) {
  PTD_ASSIGN_OR_RETURN(std::shared_ptr<void> block, AllocateBlock(nbytes, /*staging=*/true));
  void* p = block.get();
  return HostBuffer(std::move(block), p, nbytes);
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
  const auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return DeviceStats{.allocations = get(c.allocations),
                     .allocated_bytes = get(c.allocated_bytes),
                     .live_allocations = get(c.live_allocations),
                     .live_bytes = get(c.live_bytes),
                     .staging_allocations = get(c.staging_allocations),
                     .live_staging_bytes = get(c.live_staging_bytes),
                     .copies = get(c.copies),
                     .copied_bytes = get(c.copied_bytes),
                     .huge_page_bytes = get(c.huge_page_bytes),
                     .prepared_bytes = get(c.prepared_bytes)};
}

}  // namespace ptd
