#include "runtime/loader/budget_split.h"

#include <fnmatch.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "runtime/internal/strings.h"

namespace ptd::internal {
namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return b > std::numeric_limits<uint64_t>::max() - a ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint64_t Aligned(uint64_t n) {
  const uint64_t rest = n % kDeviceAlignment;
  return rest == 0 ? n : SaturatingAdd(n, kDeviceAlignment - rest);
}

}  // namespace

bool MatchesAny(absl::Span<const std::string> patterns, std::string_view name) {
  if (patterns.empty()) return false;
  const std::string n(name);  // fnmatch wants a terminated string.
  for (const std::string& p : patterns) {
    if (::fnmatch(p.c_str(), n.c_str(), 0) == 0) return true;
  }
  return false;
}

BudgetPlacement PlaceStorages(absl::Span<const uint64_t> sizes, const std::vector<bool>& host_first,
                              std::optional<uint64_t> budget) {
  BudgetPlacement p;
  p.mapped.assign(sizes.size(), false);
  bool full = budget.has_value() && *budget == 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t n = Aligned(sizes[i]);
    bool device = !host_first[i];
    if (device && budget) {
      full = full || n > *budget - p.device_bytes;  // device_bytes <= *budget.
      device = !full;
    }
    if (device) {
      p.device_bytes = SaturatingAdd(p.device_bytes, n);
      ++p.device_storages;
    } else {
      p.mapped[i] = true;
      p.mapped_bytes = SaturatingAdd(p.mapped_bytes, n);
      ++p.mapped_storages;
    }
  }
  return p;
}

std::string DescribeBytes(uint64_t n) {
  static constexpr struct {
    int shift;
    const char* unit;
  } kUnits[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& u : kUnits) {
    if (n >> u.shift == 0) continue;
    const std::string human =
        n % (uint64_t{1} << u.shift) == 0
            ? absl::StrCat(n >> u.shift, " ", u.unit)
            : absl::StrFormat("%.1f %s",
                              static_cast<double>(n) / static_cast<double>(uint64_t{1} << u.shift),
                              u.unit);
    return absl::StrCat(human, " (", n, " bytes)");
  }
  return absl::StrCat(n, n == 1 ? " byte" : " bytes");
}

uint64_t DeviceReserveBytes(const DeviceMemoryInfo& info) {
  return std::min<uint64_t>(info.total_bytes / 64, uint64_t{256} << 20);
}

absl::Status CheckPlacement(const BudgetPlacement& placement, std::optional<uint64_t> budget,
                            const DeviceMemoryInfo& info, std::string_view device_name) {
  // A budget is a cap: what it places must fit, not the budget itself (80G
  // on an 80 GB card, whose free memory is below its size, loads a model
  // that fits).
  const uint64_t reserve = DeviceReserveBytes(info);
  const uint64_t usable = info.free_bytes > reserve ? info.free_bytes - reserve : 0;
  if (budget && placement.device_bytes > usable) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the device share under the budget ", DescribeBytes(*budget), ", ",
        DescribeBytes(placement.device_bytes), " in ", placement.device_storages,
        " storage(s), is ", placement.device_bytes - usable, " bytes more than the ", usable,
        " bytes usable on ", Sv(device_name), ": ", info.free_bytes, " free of ", info.total_bytes,
        ", less a reserve of ", reserve, "; nothing was allocated"));
  }
  if (placement.mapped_bytes > 0 && info.mappable_bytes &&
      placement.mapped_bytes > *info.mappable_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the share in mapped host memory, ", DescribeBytes(placement.mapped_bytes), " in ",
        placement.mapped_storages, " storage(s), is ",
        placement.mapped_bytes - *info.mappable_bytes, " bytes more than the ",
        *info.mappable_bytes, " bytes of host memory that can be pinned for ", Sv(device_name),
        info.mappable_source.empty() ? "" : absl::StrCat(" (", info.mappable_source, ")"),
        "; nothing was allocated"));
  }
  return absl::OkStatus();
}

namespace {

std::mutex g_reserved_mu;
uint64_t g_reserved_bytes = 0;  // Guarded by g_reserved_mu.

}  // namespace

absl::StatusOr<std::shared_ptr<void>> ReserveMappedHost(const BudgetPlacement& placement,
                                                        std::optional<uint64_t> budget,
                                                        DeviceMemoryInfo info,
                                                        std::string_view device_name) {
  std::lock_guard<std::mutex> lock(g_reserved_mu);
  if (info.mappable_bytes && g_reserved_bytes > 0) {
    const uint64_t others = g_reserved_bytes;
    info.mappable_bytes = *info.mappable_bytes > others ? *info.mappable_bytes - others : 0;
    absl::StrAppend(&info.mappable_source, info.mappable_source.empty() ? "" : ", ", "less ",
                    others, " bytes that other loads of this process are about to pin");
  }
  const absl::Status st = CheckPlacement(placement, budget, info, device_name);
  if (!st.ok()) return st;
  const uint64_t n = placement.mapped_bytes;
  g_reserved_bytes += n;
  // A handle whose deleter gives the bytes back (non-null, whatever n is).
  static char token;
  return std::shared_ptr<void>(&token, [n](void*) {
    std::lock_guard<std::mutex> release(g_reserved_mu);
    g_reserved_bytes -= n;
  });
}

uint64_t MappedHostReservedBytes() {
  std::lock_guard<std::mutex> lock(g_reserved_mu);
  return g_reserved_bytes;
}

}  // namespace ptd::internal
