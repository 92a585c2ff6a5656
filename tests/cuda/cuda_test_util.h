// Shared by the CUDA device tests: a fixture that opens cuda:0 or skips.
#ifndef PTD_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define PTD_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include <memory>

#include "gtest/gtest.h"

#include "ptd/cuda_device.h"

namespace ptd {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    auto device = CudaDevice::Open(0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }
  std::shared_ptr<CudaDevice> device_;
};

}  // namespace ptd

#endif  // PTD_TESTS_CUDA_CUDA_TEST_UTIL_H_
