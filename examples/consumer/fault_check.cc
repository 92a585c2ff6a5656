// ptd-fault-check: the test support of the installed package (ptd::testing)
// as a consumer's own tests use it: a FaultDevice over the HostDevice fails
// the second allocation with the planned status, and counts both calls.
// Exits 0 when it behaves so.
#include <ptd/host_device.h>
#include <ptd/testing/fault_device.h>

#include <iostream>
#include <memory>

int main() {
  ptd::FaultPlan plan;
  plan.fail_allocation = 2;
  ptd::FaultDevice device(std::make_shared<ptd::HostDevice>(), plan);
  const auto first = device.Allocate(4096);
  const auto second = device.Allocate(4096);
  if (!first.ok() || second.ok() ||
      second.status().code() != absl::StatusCode::kResourceExhausted ||
      device.counts().allocations != 2) {
    std::cerr << "FaultDevice did not fail the second allocation: " << second.status() << "\n";
    return 1;
  }
  std::cout << "fault injected: " << second.status() << "\n";
  return 0;
}
