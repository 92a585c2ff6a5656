// What the kernel's page cache holds of a file, and dropping what a load
// brought in (the loader's read engines: read_engine.h).
#ifndef PTD_RUNTIME_IO_PAGE_CACHE_H_
#define PTD_RUNTIME_IO_PAGE_CACHE_H_

#include <cstdint>
#include <optional>

namespace ptd::internal {

// Bytes of [offset, offset + len) of the file open as `fd` that are in the
// page cache, counted in whole pages (at most len): cachestat(2) where the
// kernel has it (Linux 6.5), else mincore(2) over a mapping of the range.
// nullopt when neither works.
std::optional<uint64_t> CachedBytes(int fd, uint64_t offset, uint64_t len);

// Asks the kernel to drop the clean cached pages of [offset, offset + len)
// (posix_fadvise(POSIX_FADV_DONTNEED)); pages that another process maps or
// has dirtied stay. Best effort: false when the call failed.
bool DropCachedRange(int fd, uint64_t offset, uint64_t len);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_IO_PAGE_CACHE_H_
