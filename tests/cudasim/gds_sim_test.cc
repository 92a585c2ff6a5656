// The gds read engine (LoadOptions::io kGds: GPUDirect Storage through
// cuFile) on the simulator, through the cuFile stand-in (cufile_sim.cc,
// loaded with dlopen as the real library is): a P2P load reads every device
// storage straight into device memory with no staging copy; cuFile in its
// compatibility mode, a failing cuFileRead, a driver that does not open and
// a library that cannot be loaded each fall back to the direct engine and
// say why; auto uses gds for a cold file. Every load's digests are checked
// against a host load.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/cuda_device.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "tests/cudasim/cudasim.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ExpectSameBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The stand-in's reads so far (it counts from its driver's open).
long StandInReads() {
  void* lib = ::dlopen(PTD_CUFILE_SIM_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return 0;
  auto reads = reinterpret_cast<long (*)()>(::dlsym(lib, "ptd_cufile_sim_reads"));
  const long n = reads != nullptr ? reads() : 0;
  ::dlclose(lib);
  return n;
}

void Evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

class GdsSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Storages larger than a ring slot, neighbours that pack, a CPU weight.
    std::vector<uint64_t> sizes(200, 1000);
    for (int i = 0; i < 5; ++i) sizes.push_back((3u << 20) + 64 * i);
    m_ = WriteTestModel(dir_.path(), sizes, /*with_cpu_weight=*/true);
    paths_ = BundlePaths{.ptd = m_.ptd, .manifest = m_.manifest};
    auto host = LoadWeights(paths_, std::make_shared<HostDevice>(), {.io = IoMode::kBuffered});
    ASSERT_TRUE(host.ok()) << host.status();
    reference_.emplace(*std::move(host));
    auto gpu = CudaDevice::Open(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *gpu;
  }

  absl::StatusOr<LoadedWeights> Load(IoMode io) {
    LoadOptions o{.io = io};
    o.ring_slot_bytes = 1 << 20;
    return LoadWeights(paths_, gpu_, o);
  }

  TempDir dir_;
  TestModel m_;
  BundlePaths paths_;
  std::optional<LoadedWeights> reference_;
  std::shared_ptr<CudaDevice> gpu_;
  ScopedEnv library_{"PTD_CUFILE_LIBRARY", PTD_CUFILE_SIM_LIBRARY};
};

TEST_F(GdsSimTest, P2pReadsEveryDeviceStorageStraightIntoDeviceMemory) {
  cudasim::ResetCallCounts();
  auto w = Load(IoMode::kGds);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  EXPECT_EQ(io.gds_mode, "p2p");
  EXPECT_TRUE(io.fallbacks.empty()) << io.fallbacks[0].reason;
  // Every device byte, and the padding inside runs of neighbours (read in
  // one request each), which is well under 1%.
  const uint64_t device_bytes = w->stats().placed_device.bytes;
  EXPECT_GE(io.gds_bytes, device_bytes);
  EXPECT_LE(io.gds_bytes, device_bytes + device_bytes / 100);
  // The CPU weight's storage goes to host memory, read by the direct engine.
  EXPECT_GT(w->stats().placed_host.bytes, 0u);
  // No staging ring: no asynchronous host-to-device copy at all.
  EXPECT_EQ(cudasim::CallCount("cudaMemcpyAsync"), 0u);
  EXPECT_EQ(w->stats().copies, 0u);
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(GdsSimTest, CompatibilityModeFallsBackToDirectAndSaysSo) {
  ScopedEnv mode("PTD_CUFILE_SIM_MODE", "compat");
  auto w = Load(IoMode::kGds);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  EXPECT_EQ(io.gds_mode, "compat");
  EXPECT_EQ(io.gds_bytes, 0u);
  ASSERT_FALSE(io.fallbacks.empty());
  EXPECT_EQ(io.fallbacks[0].from, IoMode::kGds);
  EXPECT_EQ(io.fallbacks[0].to, IoMode::kDirect);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("compatibility mode"));
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(GdsSimTest, AFailingCuFileReadFallsBackForTheRest) {
  // The stand-in's second read from now fails (EIO).
  ScopedEnv fail("PTD_CUFILE_SIM_FAIL_READ", std::to_string(StandInReads() + 2));
  LoadOptions o{.io = IoMode::kGds};
  o.threads = 1;  // One read at a time: the first succeeds, the second fails.
  o.ring_slot_bytes = 1 << 20;
  auto w = LoadWeights(paths_, gpu_, o);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  EXPECT_EQ(io.gds_mode, "p2p");
  EXPECT_GT(io.gds_bytes, 0u);
  EXPECT_LT(io.gds_bytes, w->stats().placed_device.bytes);
  ASSERT_EQ(io.fallbacks.size(), 1u);
  EXPECT_EQ(io.fallbacks[0].from, IoMode::kGds);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("cuFileRead"));
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("errno 5"));
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(GdsSimTest, ADriverThatDoesNotOpenFallsBack) {
  // Another path to the same library: the loader opens its driver afresh.
  const std::string link = dir_.File("libcufile_closed.so");
  std::filesystem::create_symlink(PTD_CUFILE_SIM_LIBRARY, link);
  ScopedEnv library("PTD_CUFILE_LIBRARY", link);
  ScopedEnv fail("PTD_CUFILE_SIM_FAIL_OPEN", "1");
  auto w = Load(IoMode::kGds);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  ASSERT_FALSE(io.fallbacks.empty());
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("cuFileDriverOpen failed: cuFile error 5001"));
  EXPECT_EQ(io.gds_bytes, 0u);
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(GdsSimTest, ALibraryThatCannotBeLoadedFallsBack) {
  ScopedEnv library("PTD_CUFILE_LIBRARY", dir_.File("no/libcufile.so.0"));
  auto w = Load(IoMode::kGds);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  ASSERT_FALSE(io.fallbacks.empty());
  EXPECT_EQ(io.fallbacks[0].from, IoMode::kGds);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("cannot load cuFile"));
  EXPECT_TRUE(io.gds_mode.empty());
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(GdsSimTest, AutoReadsAColdFileWithGds) {
  // Auto reads direct (and so gds) only files of 8 MiB or more.
  TempDir dir;
  const TestModel big = WriteTestModel(dir.path(), std::vector<uint64_t>(5, 2u << 20));
  auto ref = LoadWeights(BundlePaths{.ptd = big.ptd, .manifest = big.manifest},
                         std::make_shared<HostDevice>());
  ASSERT_TRUE(ref.ok()) << ref.status();
  Evict(big.ptd);
  auto w = LoadWeights(BundlePaths{.ptd = big.ptd, .manifest = big.manifest}, gpu_,
                       {.io = IoMode::kAuto});
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  if (io.choice.rfind("direct: cold", 0) != 0) GTEST_SKIP() << "not cold here: " << io.choice;
  EXPECT_THAT(io.choice, HasSubstr("gds"));
  EXPECT_GE(io.gds_bytes, w->stats().placed_device.bytes);
  EXPECT_TRUE(io.fallbacks.empty());
  ExpectSameBytes(*w, *ref, big.fqns);
}

}  // namespace
}  // namespace ptd
