#include "ptd/open_device.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "ptd/host_device.h"
#include "runtime/internal/strings.h"

namespace ptd {
namespace {

struct Registry {
  std::mutex mu;
  absl::flat_hash_map<std::string, DeviceFactory> factories;
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

DeviceFactory FindFactory(DeviceKind kind) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(internal::Sv(DeviceKindName(kind)));
  return it == r.factories.end() ? DeviceFactory() : it->second;
}

}  // namespace

bool RegisterDeviceFactory(std::string kind, DeviceFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[std::move(kind)] = std::move(factory);
  return true;
}

absl::StatusOr<std::shared_ptr<Device>> OpenDevice(std::string_view spec) {
  // "cpu" is an alias of "host" (PyTorch's word for the same device).
  if (spec == DeviceKindName(DeviceKind::kHost) || spec == "cpu") {
    return std::make_shared<HostDevice>();
  }
  if (spec.empty() || spec == "auto") {
    if (DeviceFactory cuda = FindFactory(DeviceKind::kCuda)) {
      auto d = cuda(0);
      if (d.ok()) return d;
    }
    return std::make_shared<HostDevice>();
  }
  const std::string_view cuda_name = DeviceKindName(DeviceKind::kCuda);
  if (spec.substr(0, cuda_name.size()) == cuda_name) {
    int index = 0;
    const std::string_view rest = spec.substr(cuda_name.size());
    if (!rest.empty() &&
        (rest[0] != ':' || !absl::SimpleAtoi(internal::Sv(rest.substr(1)), &index) || index < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad device '", internal::Sv(spec), "': expected cuda or cuda:N"));
    }
    DeviceFactory cuda = FindFactory(DeviceKind::kCuda);
    if (!cuda) {
      return absl::UnavailableError(absl::StrCat("device '", internal::Sv(spec),
                                                 "': built without CUDA (no cuda device factory)"));
    }
    return cuda(index);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", internal::Sv(spec),
                                                 "': expected host (or cpu), cuda or cuda:N"));
}

}  // namespace ptd
