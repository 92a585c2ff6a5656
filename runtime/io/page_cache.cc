#include "runtime/io/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

namespace ptd::internal {
namespace {

#ifndef __NR_cachestat
#define __NR_cachestat 451  // Linux 6.5; the same number on every architecture.
#endif

// The kernel's struct cachestat_range and struct cachestat (uapi/linux/mman.h).
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

// Cleared at the first ENOSYS (a kernel before 6.5, or a seccomp filter
// that does not know the call).
std::atomic<bool> g_cachestat{true};

uint64_t PageSize() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }

std::optional<uint64_t> ByCachestat(int fd, uint64_t offset, uint64_t len) {
  if (!g_cachestat.load(std::memory_order_relaxed)) return std::nullopt;
  CachestatRange range{offset, len};
  Cachestat stat{};
  if (::syscall(__NR_cachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS || errno == EPERM) g_cachestat.store(false, std::memory_order_relaxed);
    return std::nullopt;
  }
  return std::min(len, stat.nr_cache * PageSize());
}

std::optional<uint64_t> ByMincore(int fd, uint64_t offset, uint64_t len) {
  const uint64_t page = PageSize();
  const uint64_t start = offset / page * page;
  const size_t map_len = static_cast<size_t>(offset + len - start);
  void* p = ::mmap(nullptr, map_len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (p == MAP_FAILED) return std::nullopt;
  std::vector<unsigned char> resident((map_len + page - 1) / page);
  const int rc = ::mincore(p, map_len, resident.data());
  ::munmap(p, map_len);
  if (rc != 0) return std::nullopt;
  uint64_t pages = 0;
  for (unsigned char r : resident) pages += r & 1;
  return std::min(len, pages * page);
}

}  // namespace

std::optional<uint64_t> CachedBytes(int fd, uint64_t offset, uint64_t len) {
  if (len == 0) return 0;
  if (auto n = ByCachestat(fd, offset, len)) return n;
  return ByMincore(fd, offset, len);
}

bool DropCachedRange(int fd, uint64_t offset, uint64_t len) {
  if (len == 0) return true;
  return ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                         POSIX_FADV_DONTNEED) == 0;
}

}  // namespace ptd::internal
