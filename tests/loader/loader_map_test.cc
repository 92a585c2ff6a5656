// Tests of LoadOptions::map_file: host storages at aligned file offsets
// become views of private, copy-on-write file mappings (no allocation, no
// read) with the bytes a read would give; writes through them never reach
// the file; storages at other offsets, sources that cannot map and
// non-host devices read as usual; a file that shrank is DataLoss naming the
// storage; progress and cancellation count mapped bytes.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/byte_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/sha256.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ExpectSameBytes;
using ::ptd::testing::FakeCudaDevice;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;

LoadOptions Mapped() { return LoadOptions{.map_file = true}; }

TEST(LoaderMapTest, MapsEveryAlignedStorageAndReadsNothing) {
  TempDir dir;
  std::vector<uint64_t> sizes(64, 1024);
  sizes.push_back(65536);
  sizes.push_back(3 << 20);
  const TestModel m = WriteTestModel(dir.path(), sizes, /*with_cpu_weight=*/true);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto reference = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(paths, device, Mapped());
  ASSERT_TRUE(w.ok()) << w.status();
  // The writer aligns every segment to 128 bytes: all of them map, into one
  // mapping, and nothing is allocated or read.
  EXPECT_EQ(w->stats().mapped, w->stats().storages);
  EXPECT_EQ(w->stats().mapped_bytes, w->stats().bytes);
  EXPECT_EQ(w->stats().mappings, 1u);
  EXPECT_EQ(w->stats().reads, 0u);
  EXPECT_EQ(w->stats().allocations, 0u);
  EXPECT_EQ(device->stats().allocations, 0u);
  EXPECT_GT(w->timings().first_weight_s, 0);
  for (const LoadedStorage& s : w->storages()) {
    EXPECT_TRUE(s.mapped);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.buffer.data()) % kHostAlignment, 0u);
  }
  std::vector<std::string> fqns = m.fqns;
  ExpectSameBytes(*w, *reference, fqns);
}

// A mapping of at least 64 MiB is populated by two threads or more (32 MiB
// each at least): the path TSan sees here.
TEST(LoaderMapTest, ALargeMappingIsPopulatedOnSeveralThreads) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {(64 << 20) + 4096, 4096});
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto w = LoadWeights(paths, std::make_shared<HostDevice>(),
                       LoadOptions{.threads = 4, .map_file = true});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().mapped, 2u);
  EXPECT_EQ(w->stats().mappings, 1u);
  auto reference = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectSameBytes(*w, *reference, m.fqns);
}

TEST(LoaderMapTest, WritesThroughAMappedWeightNeverReachTheFile) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {4096, 8192});
  const std::vector<uint8_t> before = ReadFileBytes(m.ptd);
  auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                       std::make_shared<HostDevice>(), Mapped());
  ASSERT_TRUE(w.ok()) << w.status();
  const LoadedWeight* w1 = w->Find("w1");
  ASSERT_NE(w1, nullptr);
  ASSERT_TRUE(w->storage(*w1).mapped);
  const std::string original = DigestLoadedWeight(*w, *w1).value();
  std::memset(w1->data, 0xAB, 8192);
  EXPECT_NE(DigestLoadedWeight(*w, *w1).value(), original);
  EXPECT_EQ(ReadFileBytes(m.ptd), before);
  // A second load sees the file's bytes, not the first load's write.
  auto again = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                           std::make_shared<HostDevice>(), Mapped());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(DigestLoadedWeight(*again, *again->Find("w1")).value(), original);
}

// A container source whose located offsets are shifted by `shift` bytes:
// storages look misaligned to the loader but read and map the right bytes.
class ShiftedSource : public ::ptd::testing::ForwardingByteSource {
 public:
  ShiftedSource(std::unique_ptr<ByteSource> inner, uint64_t shift)
      : ForwardingByteSource(std::move(inner)), shift_(shift) {}
  std::optional<Location> Locate(std::string_view key) const override {
    auto loc = inner().Locate(key);
    if (loc) loc->offset += shift_;
    return loc;
  }
  absl::Status ReadLocated(uint64_t offset, absl::Span<uint8_t> dst) const override {
    return inner().ReadLocated(offset - shift_, dst);
  }
  absl::StatusOr<std::shared_ptr<uint8_t>> MapLocated(uint64_t offset, uint64_t len,
                                                      size_t threads) const override {
    ++map_calls_;
    return inner().MapLocated(offset - shift_, len, threads);
  }
  int map_calls() const { return map_calls_; }

 private:
  uint64_t shift_;
  mutable int map_calls_ = 0;
};

TEST(LoaderMapTest, StoragesOffTheHostAlignmentAreRead) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1024, 1024, 65536});
  auto container = Container::Open(OpenPreadFile(m.ptd).value()).value();
  const std::vector<uint8_t> manifest = ReadFileBytes(m.manifest);
  auto reference = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                               std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok());
  for (const uint64_t shift : {uint64_t{0}, uint64_t{16}, uint64_t{64}}) {
    SCOPED_TRACE(shift);
    ShiftedSource source(MakeContainerByteSource(*container), shift);
    auto w = LoadWeights(manifest, source, std::make_shared<HostDevice>(), Mapped());
    ASSERT_TRUE(w.ok()) << w.status();
    const bool aligned = shift % kHostAlignment == 0;
    EXPECT_EQ(w->stats().mapped, aligned ? 3u : 0u);
    EXPECT_EQ(source.map_calls(), aligned ? 1 : 0);
    EXPECT_EQ(w->stats().reads > 0, !aligned);
    ExpectSameBytes(*w, *reference, m.fqns);
  }
}

TEST(LoaderMapTest, ASourceThatCannotMapIsRead) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1024, 65536});
  auto bundle = WeightBundle::Open(BundleSources{
      // Not named by the file's path: the loader cannot reopen it either.
      .ptd = std::shared_ptr<const FileSource>(MemorySource(ReadFileBytes(m.ptd), "<ptd>")),
      .manifest = std::shared_ptr<const FileSource>(
          MemorySource(ReadFileBytes(m.manifest), "<manifest>"))});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const auto shared = std::make_shared<const WeightBundle>(*std::move(bundle));
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(shared, device, Mapped());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().mapped, 0u);
  EXPECT_EQ(device->stats().allocations, 2u);
  EXPECT_GT(w->stats().reads, 0u);
  auto reference = LoadWeights(shared, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok());
  ExpectSameBytes(*w, *reference, m.fqns);
}

TEST(LoaderMapTest, ASubsetMapsRunsOfNeighboursNotTheWholeFile) {
  TempDir dir;
  // w1 and w2 (2 MiB each) separate w0 from w3 by more than a mapping spans.
  const TestModel m = WriteTestModel(dir.path(), {4096, 2 << 20, 2 << 20, 4096, 4096});
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto w = LoadWeights(paths, std::make_shared<HostDevice>(),
                       LoadOptions{.fqns = {"w0", "w3", "w4"}, .map_file = true});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().mapped, 3u);
  EXPECT_EQ(w->stats().mappings, 2u);  // {w0}, {w3, w4}.
  auto reference = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok());
  ExpectSameBytes(*w, *reference, {"w0", "w3", "w4"});
}

TEST(LoaderMapTest, AFileThatShrankAfterVerificationIsDataLoss) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {4096, 1 << 20});
  auto bundle = WeightBundle::Open(BundlePaths{.ptd = m.ptd, .manifest = m.manifest});
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  struct stat st;
  ASSERT_EQ(::stat(m.ptd.c_str(), &st), 0);
  ASSERT_EQ(::truncate(m.ptd.c_str(), st.st_size / 2), 0);
  auto device = std::make_shared<HostDevice>();
  auto w = LoadWeights(std::make_shared<const WeightBundle>(*std::move(bundle)), device, Mapped());
  ASSERT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
  EXPECT_THAT(w.status().message(), HasSubstr("map"));
  EXPECT_THAT(w.status().message(), HasSubstr("shrank"));
  EXPECT_THAT(w.status().message(), HasSubstr(m.ptd));
  EXPECT_EQ(device->stats().live_allocations, 0u);
}

TEST(LoaderMapTest, OnAStagingDeviceOnlyCpuWeightsMap) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {256, 512}, /*with_cpu_weight=*/true);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  auto device = std::make_shared<FakeCudaDevice>();
  auto w = LoadWeights(paths, device, Mapped());
  ASSERT_TRUE(w.ok()) << w.status();
  const LoadedWeight* cpu = w->Find("cpu.table");
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(w->storage(*cpu).mapped);
  EXPECT_FALSE(w->storage(*w->Find("w0")).mapped);
  EXPECT_EQ(w->stats().mapped, 1u);
  // w0 and w1, one run (laid out as in the file): one buffer.
  EXPECT_EQ(device->stats().allocations, 1u);
  EXPECT_EQ(w->DeviceOf(w->storage(*cpu)).kind(), DeviceKind::kHost);
  auto reference = LoadWeights(paths, std::make_shared<HostDevice>());
  ASSERT_TRUE(reference.ok());
  ExpectSameBytes(*w, *reference, m.fqns);
}

TEST(LoaderMapTest, ProgressCountsMappedBytesAndCanCancel) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1024, 1 << 20});
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  uint64_t last_done = 0, last_total = 0;
  LoadOptions o = Mapped();
  o.progress = [&](uint64_t done, uint64_t total) {
    last_done = done;
    last_total = total;
    return true;
  };
  auto w = LoadWeights(paths, std::make_shared<HostDevice>(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(last_total, m.data_bytes);
  EXPECT_EQ(last_done, m.data_bytes);
  o.progress = [](uint64_t, uint64_t) { return false; };
  auto device = std::make_shared<HostDevice>();
  auto cancelled = LoadWeights(paths, device, o);
  ASSERT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();
  EXPECT_THAT(cancelled.status().message(), HasSubstr("mapped storage"));
  EXPECT_THAT(cancelled.status().message(),
              HasSubstr("'" + std::string(w->Find("w0")->storage_key) + "'"));
}

bool KilledByAnySignal(int status) { return WIFSIGNALED(status); }

// The caveat LoadOptions::map_file documents, shown: the load succeeded, then
// another process truncated the file, and touching a weight raises SIGBUS
// (under ASan the sanitizer's handler aborts instead; a signal either way).
// The default load reads, and is immune.
TEST(LoaderMapDeathTest, AWeightOfAFileTruncatedAfterAMappedLoadFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), {1 << 20});
  EXPECT_EXIT(
      {
        auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                             std::make_shared<HostDevice>(), Mapped());
        if (!w.ok() || !w->storages()[0].mapped) _exit(3);
        if (::truncate(m.ptd.c_str(), 0) != 0) _exit(4);
        const auto* p = static_cast<const volatile uint8_t*>(w->weights()[0].data);
        uint8_t sink = 0;
        for (size_t i = 0; i < (1 << 20); i += 4096) sink = static_cast<uint8_t>(sink + p[i]);
        _exit(sink == 255 ? 5 : 0);
      },
      KilledByAnySignal, "");
  auto copied = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                            std::make_shared<HostDevice>());
  ASSERT_TRUE(copied.ok()) << copied.status();
  ASSERT_EQ(::truncate(m.ptd.c_str(), 0), 0);
  EXPECT_TRUE(DigestLoadedWeight(*copied, copied->weights()[0]).ok());
}

}  // namespace
}  // namespace ptd
