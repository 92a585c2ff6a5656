// Failures halfway through a load: every allocation, staging allocation,
// copy, wait, prepare and read index in turn; a file that shrinks during the load; a
// cancel. Each gives a clean Status naming the storage and the phase, and
// leaves nothing allocated (the suite also runs under ASan/LSan and TSan).
// Three paths: direct reads into host memory, a staging device that copies
// at Wait, and FaultDevice over AsyncDevice (copies completing later on
// other threads), where a failure must also leave no copy in flight from a
// staging block that goes.
#include <sys/types.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/testing/async_device.h"
#include "ptd/testing/fault_device.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::FaultyByteSource;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// Large (chunked), medium and many small (packed) storages, and a CPU weight.
// Sizes whose storages, in a file of 16 B alignment, are 528 B apart: not a
// multiple of 64, so that on a staging device each is a run (an allocation
// and a copy) of its own, and every one of those can fail.
std::vector<uint64_t> FaultSizes() {
  std::vector<uint64_t> s = {600 << 10, 200 << 10, 4};
  for (int i = 0; i < 40; ++i) s.push_back(520);
  return s;
}

struct Loaded {
  absl::StatusOr<LoadedWeights> weights;
  FaultCounts counts;
};

enum class Path { kDirect, kStaged, kAsync };

// The device under the FaultDevice for `path`.
std::shared_ptr<Device> Inner(Path path) {
  if (path == Path::kAsync) return std::make_shared<AsyncDevice>();
  return std::make_shared<HostDevice>();
}

FaultPlan ForPath(Path path, FaultPlan plan) {
  if (path != Path::kAsync) {
    plan.host_accessible = path == Path::kDirect;
    plan.defer_copies = path == Path::kStaged;
  }
  return plan;
}

void ExpectNothingLeft(const Device& inner) {
  EXPECT_EQ(inner.stats().live_allocations, 0u);
  EXPECT_EQ(inner.stats().live_bytes, 0u);
  EXPECT_EQ(inner.stats().live_staging_bytes, 0u);
  if (const auto* a = dynamic_cast<const AsyncDevice*>(&inner)) {
    EXPECT_EQ(a->counts().staging_freed_in_flight, 0u);
  }
}

class LoaderFaultTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    model_ = WriteTestModel(dir_.path(), FaultSizes(), /*with_cpu_weight=*/true,
                            /*segment_alignment=*/16);
    auto b = WeightBundle::Open(
        BundlePaths{.ptd = model_.ptd, .manifest = model_.manifest, .use_mmap = false});
    ASSERT_TRUE(b.ok()) << b.status();
    bundle_ = std::make_shared<const WeightBundle>(*std::move(b));
    source_ = MakeContainerByteSource(*bundle_->container());
  }
  bool staged() const { return GetParam() != Path::kDirect; }
  LoadOptions Options() const {
    return LoadOptions{
        .threads = 3, .ring_slots = 3, .ring_slot_bytes = 128 << 10, .max_read_bytes = 128 << 10};
  }

  // Loads through the ByteSource entry with `plan` and `fail_read`, then
  // checks that nothing stays allocated once the result is gone.
  Loaded Load(FaultPlan plan, uint64_t fail_read = 0) {
    std::shared_ptr<Device> host = Inner(GetParam());
    auto device = std::make_shared<FaultDevice>(host, ForPath(GetParam(), plan));
    const FaultyByteSource source(*source_, fail_read);
    std::vector<uint8_t> manifest = ::ptd::testing::ReadFileBytes(model_.manifest);
    Loaded out{LoadWeights(manifest, source, device, Options()), {}};
    out.counts = device->counts();
    if (!out.weights.ok()) {
      SCOPED_TRACE(out.weights.status().ToString());
      ExpectNothingLeft(*host);
      EXPECT_EQ(device->counts().live_allocations, 0u);
      EXPECT_EQ(device->counts().live_staging_bytes, 0u);
    }
    return out;
  }

  TempDir dir_;
  TestModel model_;
  std::shared_ptr<const WeightBundle> bundle_;
  std::unique_ptr<ByteSource> source_;
};

TEST_P(LoaderFaultTest, EveryAllocationCopyAndWaitFailsCleanly) {
  const Loaded ok = Load({});
  ASSERT_TRUE(ok.weights.ok()) << ok.weights.status();
  ASSERT_GT(ok.counts.allocations, 40u);
  if (staged()) {
    ASSERT_GT(ok.counts.copies, 40u);
    ASSERT_GT(ok.counts.waits, 5u);
    EXPECT_EQ(ok.counts.prepares, 0u) << "staging buffers are not prepared";
  } else {
    // Every direct read's destinations are prepared first: at least every
    // byte of the storages (runs also span the padding between neighbours).
    ASSERT_GT(ok.counts.prepares, 3u);
    uint64_t bytes = 0;
    for (uint64_t n : FaultSizes()) bytes += n;
    EXPECT_GE(ok.counts.prepared_bytes, bytes);
  }
  const absl::Status boom = absl::InternalError("injected");
  struct Kind {
    const char* phase;
    uint64_t count;
    FaultPlan (*plan)(uint64_t, absl::Status);
  };
  const Kind kinds[] = {
      {"allocate", ok.counts.allocations,
       [](uint64_t n, absl::Status s) { return FaultPlan{.fail_allocation = n, .status = s}; }},
      {"stage", ok.counts.staging_allocations,
       [](uint64_t n, absl::Status s) { return FaultPlan{.fail_staging = n, .status = s}; }},
      {"copy", ok.counts.copies,
       [](uint64_t n, absl::Status s) { return FaultPlan{.fail_copy = n, .status = s}; }},
      {"wait", ok.counts.waits,
       [](uint64_t n, absl::Status s) { return FaultPlan{.fail_wait = n, .status = s}; }},
      {"prepare", ok.counts.prepares,
       [](uint64_t n, absl::Status s) { return FaultPlan{.fail_prepare = n, .status = s}; }},
  };
  for (const Kind& k : kinds) {
    for (uint64_t n = 1; n <= k.count; ++n) {
      SCOPED_TRACE(std::string(k.phase) + " #" + std::to_string(n));
      const Loaded r = Load(k.plan(n, boom));
      if (k.plan(n, boom).fail_prepare != 0 && r.weights.ok()) {
        // One PrepareWrite covers destinations that lie less than a page
        // apart, so the number of calls depends on where the heap put the
        // buffers: this load made fewer than n.
        EXPECT_LT(r.counts.prepares, n);
        ASSERT_GT(n, 1u);
        continue;
      }
      ASSERT_FALSE(r.weights.ok());
      EXPECT_EQ(r.weights.status().code(), absl::StatusCode::kInternal);
      EXPECT_THAT(r.weights.status().message(), HasSubstr("storage '"));
      EXPECT_THAT(r.weights.status().message(), HasSubstr(std::string(k.phase)));
      EXPECT_THAT(r.weights.status().message(), HasSubstr("injected"));
    }
  }
}

TEST_P(LoaderFaultTest, EveryReadFailsCleanly) {
  const Loaded ok = Load({});
  ASSERT_TRUE(ok.weights.ok());
  const uint64_t reads = ok.weights->stats().reads;
  ASSERT_GT(reads, 3u);
  for (uint64_t n = 1; n <= reads; ++n) {
    SCOPED_TRACE("read #" + std::to_string(n));
    const Loaded r = Load({}, n);
    ASSERT_FALSE(r.weights.ok());
    EXPECT_EQ(r.weights.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(r.weights.status().message(), HasSubstr("storage '"));
    EXPECT_THAT(r.weights.status().message(), HasSubstr("read: injected read fault"));
  }
}

TEST_P(LoaderFaultTest, CancelStopsTheLoadAndFreesEverything) {
  std::shared_ptr<Device> host = Inner(GetParam());
  auto device = std::make_shared<FaultDevice>(host, ForPath(GetParam(), {}));
  LoadOptions o = Options();
  int calls = 0;
  o.progress = [&](uint64_t, uint64_t) { return ++calls < 3; };
  {
    auto w = LoadWeights(bundle_, device, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kCancelled);
    EXPECT_THAT(w.status().message(), HasSubstr("storage '"));
    EXPECT_THAT(w.status().message(), HasSubstr("cancelled"));
  }
  EXPECT_EQ(calls, 3);
  ExpectNothingLeft(*host);
}

TEST_P(LoaderFaultTest, FileShrinkingDuringTheLoadIsDataLoss) {
  std::shared_ptr<Device> host = Inner(GetParam());
  auto device = std::make_shared<FaultDevice>(host, ForPath(GetParam(), {}));
  LoadOptions o = Options();
  o.threads = 1;
  const std::string path = model_.ptd;
  o.progress = [&](uint64_t, uint64_t) {
    // After the first read, cut the file back to its metadata.
    EXPECT_EQ(::truncate(path.c_str(), 4096), 0);
    return true;
  };
  {
    auto w = LoadWeights(bundle_, device, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
    EXPECT_THAT(w.status().message(), HasSubstr("storage '"));
    EXPECT_THAT(w.status().message(), HasSubstr("read: "));
  }
  ExpectNothingLeft(*host);
}

TEST(LoaderShrinkTest, MappedBundleOfAShrunkFileIsDataLossNotSigbus) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1 << 20, 4096});
  // Verified through a mapping (pread is the default): the loader still
  // reads with pread.
  auto b = WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = m.manifest, .use_mmap = true});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->container()->source().View(0, 0).has_value());  // A mapping.
  ASSERT_EQ(::truncate(m.ptd.c_str(), 8192), 0);
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(std::make_shared<const WeightBundle>(*std::move(b)), device);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(w.status().message(), AnyOf(HasSubstr("when verified"), HasSubstr("storage '")));
  EXPECT_EQ(device->stats().live_allocations, 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, LoaderFaultTest,
                         ::testing::Values(Path::kDirect, Path::kStaged, Path::kAsync),
                         [](const auto& p) {
                           switch (p.param) {
                             case Path::kDirect:
                               return "Direct";
                             case Path::kStaged:
                               return "Staged";
                             case Path::kAsync:
                               return "Async";
                           }
                           return "";
                         });

}  // namespace
}  // namespace ptd
