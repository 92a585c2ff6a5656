// Free memory by block size, from the text of /proc/buddyinfo: how much of
// it lies in blocks of at least a given order, the question HostDevice asks
// before it advises transparent huge pages (a huge-page fault served from a
// free block of that order never compacts).
#ifndef PTD_RUNTIME_DEVICE_BUDDYINFO_H_
#define PTD_RUNTIME_DEVICE_BUDDYINFO_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

#include "runtime/internal/strings.h"

namespace ptd::internal {

// Blocks of order `order` that the free lists of every zone could hand out
// without splitting anything below it or compacting: a free block of order
// k >= order counts as 2^(k - order) of them. Lines look like
//   "Node 0, zone   Normal     35      2    226 ...  263"
// (column i: free blocks of order i). nullopt when no line parses or a
// count overflows.
inline std::optional<uint64_t> FreeBlocksOfOrder(std::string_view buddyinfo, int order) {
  if (order < 0 || order > 40) return std::nullopt;
  uint64_t total = 0;
  bool any = false;
  for (absl::string_view line : absl::StrSplit(Sv(buddyinfo), '\n')) {
    const size_t zone = line.find("zone");
    if (zone == absl::string_view::npos) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line.substr(zone + 4), ' ', absl::SkipEmpty());
    if (fields.size() < 2) continue;
    // fields[0] is the zone's name, then one count per order.
    for (size_t i = 1; i < fields.size(); ++i) {
      uint64_t count = 0;
      if (!absl::SimpleAtoi(fields[i], &count)) return std::nullopt;
      const int k = static_cast<int>(i - 1);
      if (k < order) continue;
      if (k - order >= 40) return std::nullopt;
      const uint64_t per = uint64_t{1} << (k - order);
      if (count > (UINT64_MAX - total) / per) return std::nullopt;
      total += count * per;
    }
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_DEVICE_BUDDYINFO_H_
