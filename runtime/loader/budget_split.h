// Where a load puts each storage bound for a device that is not the host:
// device memory, or host memory mapped for the device's kernels
// (LoadOptions::device_budget_bytes, LoadOptions::host_fqns). Private to
// ptd::loader; pure functions, so that the rules are tested without a
// device.
#ifndef PTD_RUNTIME_LOADER_BUDGET_SPLIT_H_
#define PTD_RUNTIME_LOADER_BUDGET_SPLIT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "ptd/device.h"

namespace ptd::internal {

// True when `name` matches one of `patterns` (fnmatch(3) without flags:
// `*` and `?` match any characters, `/` and `.` included; `[...]` a set).
bool MatchesAny(absl::Span<const std::string> patterns, std::string_view name);

// The split of the storages bound for the device (Residency::kDevice, plan.h)
// between device memory and host memory mapped for it.
struct BudgetPlacement {
  std::vector<bool> mapped;  // Per storage: to mapped host memory.
  // Each arena's bytes at most: its storages, each rounded up to
  // kDeviceAlignment (an arena never needs more, in whatever order).
  uint64_t device_bytes = 0;
  uint64_t mapped_bytes = 0;
  uint64_t device_storages = 0;
  uint64_t mapped_storages = 0;
};

// Places the storages of `sizes`, given in manifest order. A storage with
// `host_first` set goes to mapped host memory. The others go to device
// memory, in order, while the device share stays within `budget` (each
// storage rounded up to kDeviceAlignment); from the first that does not
// fit, they all go to mapped memory. A budget of 0 puts nothing on the
// device; none (nullopt) puts every storage not `host_first` there.
// REQUIRES: host_first.size() == sizes.size().
BudgetPlacement PlaceStorages(absl::Span<const uint64_t> sizes, const std::vector<bool>& host_first,
                              std::optional<uint64_t> budget);

// Device memory a budgeted load leaves free: 1/64 of the device's total, at
// most 256 MiB (the allocator's own rounding, and what the kernels and the
// caller's next allocations need).
uint64_t DeviceReserveBytes(const DeviceMemoryInfo& info);

// Checks a placement against what the device has, before anything is
// allocated: ResourceExhausted when, with a budget, the device share it
// placed is over the device's free memory less DeviceReserveBytes (a budget
// is a cap: one larger than the device is fine when what it places fits), or
// when the mapped share is over what the host can pin; each message names
// both numbers and the shortfall in bytes.
absl::Status CheckPlacement(const BudgetPlacement& placement, std::optional<uint64_t> budget,
                            const DeviceMemoryInfo& info, std::string_view device_name);

// Mapped host memory that loads of this process have checked and not yet
// allocated (MemAvailable does not show it until they do): one counter for
// the process, so that two loads at once do not each count on all of it.
// ReserveMappedHost checks `placement` as CheckPlacement does, with
// `info.mappable_bytes` less what other loads hold, and on success holds the
// mapped share until the returned handle is reset or destroyed (after the
// allocation).
absl::StatusOr<std::shared_ptr<void>> ReserveMappedHost(const BudgetPlacement& placement,
                                                        std::optional<uint64_t> budget,
                                                        DeviceMemoryInfo info,
                                                        std::string_view device_name);
uint64_t MappedHostReservedBytes();

// "96 MiB (100663296 bytes)", "1.5 GiB (1610612736 bytes)", "100 bytes".
std::string DescribeBytes(uint64_t n);

}  // namespace ptd::internal

#endif  // PTD_RUNTIME_LOADER_BUDGET_SPLIT_H_
