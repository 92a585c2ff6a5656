// A simulator configuration for one test: `devices` devices of `capacity`
// bytes each, back to the defaults when the test is done.
#ifndef PTD_TESTS_CUDASIM_SIM_DEVICES_H_
#define PTD_TESTS_CUDASIM_SIM_DEVICES_H_

#include <cstdint>

#include "tests/cudasim/cudasim.h"

namespace cudasim {

class SimDevices {
 public:
  explicit SimDevices(int devices, uint64_t capacity = uint64_t{80} << 30) {
    Config config = CurrentConfig();
    config.devices = devices;
    config.capacity = capacity;
    ok_ = Configure(config);
  }
  ~SimDevices() { (void)Configure(Config{}); }
  SimDevices(const SimDevices&) = delete;
  SimDevices& operator=(const SimDevices&) = delete;
  // False when something was live, so the configuration did not change.
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

}  // namespace cudasim

#endif  // PTD_TESTS_CUDASIM_SIM_DEVICES_H_
