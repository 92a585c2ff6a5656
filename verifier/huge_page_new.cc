// The command-line tools' global operator new and delete: once
// UseHugePagesForLargeBlocks() turns it on, a block of kLargeBlockBytes or
// more is a mapping of its own, advised onto transparent huge pages
// (MADV_HUGEPAGE); smaller blocks, and every block before that call, are
// malloc's. This is what glibc's glibc.malloc.hugetlb=1 tunable does for the
// blocks it maps, without the re-exec that tunable needs (glibc reads
// tunables only as a process starts; the exec cost 3-4 ms of every run on
// these machines, and its GLIBC_TUNABLES reached every child process).
//
// Sanitizer builds keep their allocator's operator new (their interceptors
// check every block): there this file defines only the switch, which stays
// off.
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "verifier/cli_util.h"

namespace ptd::cli {
namespace {

std::atomic<bool> g_on{false};

#if !PTD_CLI_SANITIZER

constexpr size_t kPage = 4096;

// The large blocks alive, in a fixed table: no allocation of its own, no
// lock. Unsized deletes (delete[] of a trivially destructible array, which
// takes no size) search it from slot 0 to the highest slot ever used; a sized
// delete of less than kLargeBlockBytes never does.
constexpr size_t kSlots = 1024;
struct Slot {
  std::atomic<void*> block{nullptr};
  size_t bytes = 0;  // Written by the thread that claimed the slot, before it returns the block.
};
Slot g_slots[kSlots];
std::atomic<size_t> g_used{0};  // Slots [0, g_used) were used at some time.
std::atomic<size_t> g_live{0};  // Large blocks alive.

// A mapping for `n` bytes on huge pages, recorded in the table; null when
// the mapping or a slot is not to be had (then malloc serves the block).
void* MapLargeBlock(size_t n) {
  if (n > SIZE_MAX - kPage) return nullptr;
  const size_t bytes = (n + kPage - 1) / kPage * kPage;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  (void)::madvise(p, bytes, MADV_HUGEPAGE);  // Advice: 4 KiB pages without it.
  for (size_t i = 0; i < kSlots; ++i) {
    void* empty = nullptr;
    if (g_slots[i].block.load(std::memory_order_relaxed) != nullptr ||
        !g_slots[i].block.compare_exchange_strong(empty, p, std::memory_order_acq_rel)) {
      continue;
    }
    // Whoever deletes `p` got it from this thread, after this store.
    g_slots[i].bytes = bytes;
    size_t used = g_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    g_live.fetch_add(1, std::memory_order_release);
    return p;
  }
  ::munmap(p, bytes);
  return nullptr;
}

// Unmaps `p` when it is a large block of the table; false when it is not.
bool UnmapLargeBlock(void* p) {
  if (p == nullptr || g_live.load(std::memory_order_acquire) == 0) return false;
  const size_t used = g_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < used; ++i) {
    if (g_slots[i].block.load(std::memory_order_relaxed) != p) continue;
    const size_t bytes = g_slots[i].bytes;
    g_slots[i].block.store(nullptr, std::memory_order_release);
    g_live.fetch_sub(1, std::memory_order_release);
    ::munmap(p, bytes);
    return true;
  }
  return false;
}

// operator new's contract: a block, or the new-handler until there is one,
// or std::bad_alloc when there is no handler.
void* Allocate(size_t n, size_t align) {
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
    if (n >= kLargeBlockBytes && align <= kPage && g_on.load(std::memory_order_relaxed)) {
      p = MapLargeBlock(n);
    }
    if (p == nullptr) {
      if (align <= alignof(std::max_align_t)) {
        p = std::malloc(n);
      } else if (n <= SIZE_MAX - align) {
        p = std::aligned_alloc(align, (n + align - 1) / align * align);
      }
    }
    if (p != nullptr) return p;
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* AllocateNoThrow(size_t n, size_t align) noexcept {
  try {
    return Allocate(n, align);
  } catch (...) {
    return nullptr;
  }
}

void Free(void* p) noexcept {
  if (!UnmapLargeBlock(p)) std::free(p);
}

// A block of fewer bytes than kLargeBlockBytes is never a mapping of its own.
void FreeSized(void* p, size_t n) noexcept {
  if (n < kLargeBlockBytes || !UnmapLargeBlock(p)) std::free(p);
}

#endif  // !PTD_CLI_SANITIZER

}  // namespace

bool UseHugePagesForLargeBlocks() {
#if PTD_CLI_SANITIZER
  return false;
#else
  g_on.store(true, std::memory_order_relaxed);
  return true;
#endif
}

bool HugePagesForLargeBlocks() { return g_on.load(std::memory_order_relaxed); }

}  // namespace ptd::cli

#if !PTD_CLI_SANITIZER

using ptd::cli::Allocate;
using ptd::cli::AllocateNoThrow;
using ptd::cli::Free;
using ptd::cli::FreeSized;

constexpr size_t kDefaultAlign = alignof(std::max_align_t);

void* operator new(size_t n) { return Allocate(n, kDefaultAlign); }
void* operator new[](size_t n) { return Allocate(n, kDefaultAlign); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return AllocateNoThrow(n, kDefaultAlign);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return AllocateNoThrow(n, kDefaultAlign);
}
void* operator new(size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return AllocateNoThrow(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return AllocateNoThrow(n, static_cast<size_t>(a));
}

void operator delete(void* p) noexcept { Free(p); }
void operator delete[](void* p) noexcept { Free(p); }
void operator delete(void* p, size_t n) noexcept { FreeSized(p, n); }
void operator delete[](void* p, size_t n) noexcept { FreeSized(p, n); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, size_t n, std::align_val_t) noexcept { FreeSized(p, n); }
void operator delete[](void* p, size_t n, std::align_val_t) noexcept { FreeSized(p, n); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Free(p); }

#endif  // !PTD_CLI_SANITIZER
