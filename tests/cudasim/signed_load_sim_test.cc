// Signed loads onto a GPU, on the simulator (label "cudasim"): the .ptd's
// digests ride on the staging ring's reads; a load split by a device budget
// (several plans) hashes the file after the load instead; a tampered byte
// fails the load with A5 and leaves no device or pinned memory behind.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/cuda_device.h"
#include "ptd/file_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "tests/cudasim/cudasim.h"
#include "tests/cudasim/sim_devices.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/signing_fixture.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::SignFolder;
using ::ptd::testing::SignSpec;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestKey;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteFile;
using ::ptd::testing::WriteFileBytes;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class SignedLoadSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.path() + "/model";
    std::filesystem::create_directories(model_dir_);
    model_ = WriteTestModel(model_dir_, std::vector<uint64_t>(12, kMiB + 4096));
    WriteFile(keys_.File("key.pub"), key_.public_pem);
    SignFolder(model_dir_, key_,
               SignSpec{.method = "shards", .hash = "sha256", .shard_size = 2 * kMiB});
  }
  LoadOptions Options() const {
    LoadOptions o;
    o.signature = SignatureOptions{.signature = model_dir_ + "/model.sig",
                                   .public_key = keys_.File("key.pub"),
                                   .certificate_chain = "",
                                   .model_dir = ""};
    return o;
  }
  BundlePaths Paths() const { return BundlePaths{.ptd = model_.ptd, .manifest = model_.manifest}; }
  void FlipWeightByte() const {
    auto c = Container::Open(*OpenPreadFile(model_.ptd));
    ASSERT_TRUE(c.ok());
    const uint64_t at = (*c)->SegmentFileOffset((*c)->named_data()[5].segment_index) + 100;
    std::vector<uint8_t> b = ReadFileBytes(model_.ptd);
    b[at] ^= 0x80;
    WriteFileBytes(model_.ptd, b);
  }

  TempDir dir_, keys_;
  std::string model_dir_;
  TestModel model_;
  TestKey key_ = TestKey::Make();
};

TEST_F(SignedLoadSimTest, StagedLoadHashesOnTheRingsReads) {
  cudasim::SimDevices sim(1, 256 * kMiB);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto host = LoadWeights(Paths(), std::make_shared<HostDevice>());
  ASSERT_TRUE(host.ok());
  {
    auto w = LoadWeights(Paths(), *gpu, Options());
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(w->stats().signature.verified);
    EXPECT_TRUE(w->stats().signature.one_pass);
    ptd::testing::ExpectSameBytes(*w, *host, model_.fqns);
  }
  FlipWeightByte();
  const absl::Status st = LoadWeights(Paths(), *gpu, Options()).status();
  EXPECT_THAT(std::string(st.message()), ::testing::EndsWith("(A5)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(model_.ptd));
  // Nothing is handed out, and nothing stays allocated (but the device's
  // cache of staging buffers, which it keeps for the next load).
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), (*gpu)->staging_cache_bytes());
}

TEST_F(SignedLoadSimTest, ABudgetedLoadHashesTheFileAfterItsPlans) {
  cudasim::SimDevices sim(1, 256 * kMiB);
  ASSERT_TRUE(sim.ok());
  auto gpu = CudaDevice::Open(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  LoadOptions o = Options();
  o.device_budget_bytes = 4 * kMiB;
  {
    auto w = LoadWeights(Paths(), *gpu, o);
    ASSERT_TRUE(w.ok()) << w.status();
    const SignatureReport& r = w->stats().signature;
    EXPECT_TRUE(r.verified);
    EXPECT_FALSE(r.one_pass);
    EXPECT_THAT(r.one_pass_note, HasSubstr("several plans"));
    EXPECT_GT(w->stats().placed_mapped_host.storages, 0u);
  }
  FlipWeightByte();
  EXPECT_THAT(std::string(LoadWeights(Paths(), *gpu, o).status().message()),
              ::testing::EndsWith("(A5)"));
  EXPECT_EQ(cudasim::DeviceBytesInUse(0), 0u);
  EXPECT_EQ(cudasim::PinnedBytesInUse(), (*gpu)->staging_cache_bytes());
}

}  // namespace
}  // namespace ptd
