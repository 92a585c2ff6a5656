// Tests of the loader's read engines (LoadOptions::io): the aligned read
// planner (whole blocks, no block twice, little padding), direct loads that
// give a buffered load's bytes and leave the page cache as they found it,
// auto's choice by what the page cache holds, and the fallbacks (tmpfs, a
// source without a file, gds on the host), each named in LoadStats::io.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "runtime/io/direct_file.h"
#include "runtime/io/page_cache.h"
#include "runtime/loader/transfer.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::internal::CachedBytes;
using ::ptd::internal::DropCachedRange;
using ::ptd::internal::PlanAlignedReads;
using ::ptd::internal::ReadPlan;
using ::ptd::internal::StorageJob;
using ::ptd::testing::ExpectSameBytes;
using ::ptd::testing::FakeCudaDevice;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kBlock = 4096;

// Storages of `sizes` at file offsets packed at `alignment` from `begin`.
std::vector<StorageJob> Packed(const std::vector<uint64_t>& sizes, uint64_t alignment,
                               uint64_t begin) {
  std::vector<StorageJob> jobs;
  uint64_t at = begin;
  for (size_t i = 0; i < sizes.size(); ++i) {
    StorageJob j;
    j.nbytes = sizes[i];
    j.location = ByteSource::Location{.segment = i, .offset = at};
    jobs.push_back(j);
    at = (at + sizes[i] + alignment - 1) / alignment * alignment;
  }
  return jobs;
}

// Checks the invariants of an aligned plan of every storage in `jobs`;
// returns the bytes it reads.
uint64_t CheckAlignedPlan(const std::vector<StorageJob>& jobs, const ReadPlan& plan,
                          uint64_t max_read) {
  std::vector<uint64_t> covered(jobs.size(), 0);
  uint64_t read = 0, last_end = 0;
  for (const auto& item : plan.items) {
    EXPECT_TRUE(item.aligned && item.located);
    EXPECT_EQ(item.offset % kBlock, 0u);
    EXPECT_EQ(item.nbytes % kBlock, 0u);
    EXPECT_LE(item.nbytes, max_read);
    // In file order, and no block read twice.
    EXPECT_GE(item.offset, last_end);
    last_end = item.offset + item.nbytes;
    read += item.nbytes;
    for (uint32_t k = 0; k < item.num_pieces; ++k) {
      const auto& p = plan.pieces[item.first_piece + k];
      EXPECT_LE(p.src_offset + p.nbytes, item.nbytes);
      // The piece is the storage's bytes at the same file offset.
      EXPECT_EQ(item.offset + p.src_offset, jobs[p.storage].location->offset + p.dst_offset);
      covered[p.storage] += p.nbytes;
    }
  }
  for (size_t s = 0; s < jobs.size(); ++s) EXPECT_EQ(covered[s], jobs[s].nbytes) << s;
  return read;
}

std::vector<uint32_t> All(size_t n) {
  std::vector<uint32_t> which(n);
  for (uint32_t i = 0; i < n; ++i) which[i] = i;
  return which;
}

TEST(PlanAlignedReadsTest, LargeStoragesAtSmallAlignmentShareTheirBoundaryBlocks) {
  // 4 MiB storages 128-byte aligned after a 300-byte header: every storage
  // boundary falls inside a block that two storages share.
  const auto jobs = Packed(std::vector<uint64_t>(64, (4u << 20) + 200), 128, 300);
  const uint64_t max_read = 4u << 20;
  const ReadPlan plan = PlanAlignedReads(jobs, All(jobs.size()), max_read, 4096, kBlock, 1 << 20);
  const uint64_t read = CheckAlignedPlan(jobs, plan, max_read);
  uint64_t need = 0;
  for (const auto& j : jobs) need += j.nbytes;
  EXPECT_LE(read, need + need / 100) << "reads at most 1% more than the storages need";
  EXPECT_EQ(plan.max_item_bytes, max_read);
}

TEST(PlanAlignedReadsTest, SmallStoragesPackIntoWholeBlockRanges) {
  std::mt19937 rng(7);
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 20000; ++i) sizes.push_back(16 + rng() % 3000);
  for (uint64_t alignment : {16u, 128u}) {
    const auto jobs = Packed(sizes, alignment, 1000);
    const ReadPlan plan = PlanAlignedReads(jobs, All(jobs.size()), 1 << 20, 4096, kBlock, 1 << 20);
    const uint64_t read = CheckAlignedPlan(jobs, plan, 1 << 20);
    uint64_t span = jobs.back().location->offset + jobs.back().nbytes - 1000;
    EXPECT_LE(read, span + span / 100) << alignment;
  }
}

TEST(PlanAlignedReadsTest, ASubsetFarApartIsReadAsSeparateRanges) {
  auto jobs = Packed(std::vector<uint64_t>(100, 1 << 16), 128, 0);
  const std::vector<uint32_t> which = {3, 50, 51, 97};
  const ReadPlan plan = PlanAlignedReads(jobs, which, 1 << 20, 4096, kBlock, 1 << 20);
  uint64_t read = 0;
  for (const auto& item : plan.items) read += item.nbytes;
  EXPECT_EQ(plan.items.size(), 3u);
  EXPECT_LE(read, 4 * (1 << 16) + 3 * 2 * kBlock);
}

LoadOptions Io(IoMode io) { return LoadOptions{.io = io}; }

// Evicts `path` from the page cache; false when this machine keeps it.
bool Evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const uint64_t size = std::filesystem::file_size(path);
  ::fdatasync(fd);
  DropCachedRange(fd, 0, size);
  const auto cached = CachedBytes(fd, 0, size);
  ::close(fd);
  return cached && *cached <= size / 100;
}

std::optional<uint64_t> Cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  auto n = CachedBytes(fd, 0, std::filesystem::file_size(path));
  ::close(fd);
  return n;
}

bool DirectRefused(const IoReport& io) {
  return !io.fallbacks.empty() && io.fallbacks[0].from == IoMode::kDirect;
}

class ReadEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint64_t> sizes(300, 1000);
    // Over 8 MiB: auto reads smaller files buffered whatever their state.
    for (int i = 0; i < 9; ++i) sizes.push_back((1u << 20) + 4 * i);
    m_ = WriteTestModel(dir_.path(), sizes, /*with_cpu_weight=*/true);
    paths_ = BundlePaths{.ptd = m_.ptd, .manifest = m_.manifest};
    auto ref = LoadWeights(paths_, std::make_shared<HostDevice>(), Io(IoMode::kBuffered));
    ASSERT_TRUE(ref.ok()) << ref.status();
    reference_.emplace(*std::move(ref));
  }
  TempDir dir_;
  TestModel m_;
  BundlePaths paths_;
  std::optional<LoadedWeights> reference_;
};

TEST_F(ReadEngineTest, BufferedReadsEverythingThroughThePageCache) {
  const IoReport& io = reference_->stats().io;
  EXPECT_EQ(io.requested, IoMode::kBuffered);
  EXPECT_EQ(io.direct_bytes, 0u);
  EXPECT_GE(io.buffered_bytes, reference_->stats().bytes);
  EXPECT_TRUE(io.fallbacks.empty());
  EXPECT_EQ(io.direct_readers, 0u);
}

TEST_F(ReadEngineTest, DirectGivesTheBufferedBytesAndLeavesTheCacheAsItWas) {
  if (!Evict(m_.ptd)) GTEST_SKIP() << "the page cache keeps " << m_.ptd << " here";
  LoadOptions one_thread = Io(IoMode::kDirect);
  one_thread.threads = 1;
  auto w = LoadWeights(paths_, std::make_shared<HostDevice>(), one_thread);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  if (DirectRefused(io)) GTEST_SKIP() << "no O_DIRECT here: " << io.fallbacks[0].reason;
  EXPECT_EQ(io.requested, IoMode::kDirect);
  EXPECT_TRUE(io.fallbacks.empty());
  EXPECT_GE(io.direct_bytes, w->stats().bytes);
  EXPECT_EQ(io.buffered_bytes, 0u);
  EXPECT_THAT(io.queue, ::testing::AnyOf("io_uring", "threads"));
  // Reads that wait on the disk: more threads than LoadOptions::threads
  // (the model has several reads), never more than the reads.
  EXPECT_GT(w->stats().reads, 1u);
  EXPECT_EQ(io.direct_readers, std::min<uint64_t>(kDirectReadersPerThread, w->stats().reads));
  ExpectSameBytes(*w, *reference_, m_.fqns);
  // What verification read (the header and tables, with the kernel's
  // readahead of at most 512 KiB after them) is all that is cached.
  const auto after = Cached(m_.ptd);
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(*after, m_.data_bytes / 100 + (512 << 10));
}

TEST_F(ReadEngineTest, AutoReadsAWarmFileBufferedAndAColdOneDirect) {
  auto warm = LoadWeights(paths_, std::make_shared<HostDevice>(), Io(IoMode::kAuto));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->stats().io.direct_bytes, 0u);
  EXPECT_EQ(warm->stats().io.direct_readers, 0u);
  EXPECT_THAT(warm->stats().io.choice, StartsWith("buffered: warm"));
  EXPECT_TRUE(warm->stats().io.fallbacks.empty());

  if (!Evict(m_.ptd)) GTEST_SKIP() << "the page cache keeps " << m_.ptd << " here";
  auto cold = LoadWeights(paths_, std::make_shared<HostDevice>(), Io(IoMode::kAuto));
  ASSERT_TRUE(cold.ok()) << cold.status();
  const IoReport& io = cold->stats().io;
  if (DirectRefused(io)) GTEST_SKIP() << "no O_DIRECT here: " << io.fallbacks[0].reason;
  EXPECT_GT(io.direct_bytes, 0u);
  EXPECT_THAT(io.choice, ::testing::AnyOf(StartsWith("direct: cold"), StartsWith("per range")));
  ASSERT_TRUE(io.cached_bytes.has_value());
  EXPECT_LT(*io.cached_bytes, io.file_bytes);
  ExpectSameBytes(*cold, *reference_, m_.fqns);
}

TEST(ReadEngineSmallTest, AutoReadsASmallFileBufferedEvenCold) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(100, 4000));
  (void)Evict(m.ptd);
  auto w = LoadWeights(BundlePaths{.ptd = m.ptd, .manifest = m.manifest},
                       std::make_shared<HostDevice>(), Io(IoMode::kAuto));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->stats().io.direct_bytes, 0u);
  EXPECT_THAT(w->stats().io.choice, StartsWith("buffered: a small file"));
}

TEST_F(ReadEngineTest, DirectOnTmpfsFallsBackToBufferedAndSaysWhy) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  TempDir shm;  // Removed at the end; the copy below goes to /dev/shm.
  const std::string ptd =
      "/dev/shm/" + std::filesystem::path(shm.path()).filename().string() + "-model.ptd";
  std::filesystem::copy_file(m_.ptd, ptd);
  auto w = LoadWeights(BundlePaths{.ptd = ptd, .manifest = m_.manifest},
                       std::make_shared<HostDevice>(), Io(IoMode::kDirect));
  std::filesystem::remove(ptd);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  ASSERT_EQ(io.fallbacks.size(), 1u);
  EXPECT_EQ(io.fallbacks[0].from, IoMode::kDirect);
  EXPECT_EQ(io.fallbacks[0].to, IoMode::kBuffered);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("tmpfs"));
  EXPECT_EQ(io.direct_bytes, 0u);
  EXPECT_EQ(io.buffered_bytes, w->stats().bytes_read);
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(ReadEngineTest, GdsOnTheHostFallsBackToDirect) {
  auto w = LoadWeights(paths_, std::make_shared<HostDevice>(), Io(IoMode::kGds));
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  ASSERT_GE(io.fallbacks.size(), 1u);
  EXPECT_EQ(io.fallbacks[0].from, IoMode::kGds);
  EXPECT_EQ(io.fallbacks[0].to, IoMode::kDirect);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("the device is the host"));
  EXPECT_EQ(io.gds_bytes, 0u);
  EXPECT_TRUE(io.gds_mode.empty());
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(ReadEngineTest, DirectThroughAStagingRingGivesTheSameBytes) {
  if (!Evict(m_.ptd)) GTEST_SKIP() << "the page cache keeps " << m_.ptd << " here";
  LoadOptions o = Io(IoMode::kDirect);
  o.ring_slot_bytes = 256 << 10;  // Storages larger than a slot span several.
  auto w = LoadWeights(paths_, std::make_shared<FakeCudaDevice>(), o);
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  if (DirectRefused(io)) GTEST_SKIP() << "no O_DIRECT here: " << io.fallbacks[0].reason;
  EXPECT_GE(io.direct_bytes, w->stats().bytes);
  ExpectSameBytes(*w, *reference_, m_.fqns);
}

TEST_F(ReadEngineTest, ASourceWithoutAFileReadsBufferedAndSaysWhy) {
  auto bundle = WeightBundle::Open(paths_);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  // A forwarding source has locations but no file of its own.
  ::ptd::testing::ForwardingByteSource source(MakeContainerByteSource(*bundle->container()));
  const std::vector<uint8_t> manifest = ::ptd::testing::ReadFileBytes(m_.manifest);
  auto w = LoadWeights(manifest, source, std::make_shared<HostDevice>(), Io(IoMode::kDirect));
  ASSERT_TRUE(w.ok()) << w.status();
  const IoReport& io = w->stats().io;
  ASSERT_EQ(io.fallbacks.size(), 1u);
  EXPECT_THAT(io.fallbacks[0].reason, HasSubstr("reads no file of its own"));
  EXPECT_EQ(io.direct_bytes, 0u);
  EXPECT_EQ(io.buffered_bytes, w->stats().bytes_read);
}

TEST(DirectFileTest, AReadPastTheEndReturnsTheBytesThereAre) {
  TempDir dir;
  const std::string path = dir.File("f");
  std::vector<uint8_t> bytes(5000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  ::ptd::testing::WriteFileBytes(path, bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto f = internal::DirectFile::Open(fd, path);
  ::close(fd);
  if (!f.ok()) GTEST_SKIP() << f.status();
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> buf(
      static_cast<uint8_t*>(::operator new[](8192, std::align_val_t{kBlock})),
      [](uint8_t* p) { ::operator delete[](p, std::align_val_t{kBlock}); });
  auto got = (*f)->Read(0, absl::MakeSpan(buf.get(), 8192));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 5000u);
  EXPECT_EQ(std::vector<uint8_t>(buf.get(), buf.get() + 5000), bytes);
  auto past = (*f)->Read(8192, absl::MakeSpan(buf.get(), 4096));
  ASSERT_TRUE(past.ok()) << past.status();
  EXPECT_EQ(*past, 0u);
}

TEST(IoModeTest, NamesRoundTrip) {
  for (IoMode m : {IoMode::kAuto, IoMode::kBuffered, IoMode::kDirect, IoMode::kGds}) {
    EXPECT_EQ(ParseIoMode(IoModeName(m)), m);
  }
  EXPECT_EQ(ParseIoMode("Direct"), std::nullopt);
  EXPECT_EQ(ParseIoMode(""), std::nullopt);
}

}  // namespace
}  // namespace ptd
