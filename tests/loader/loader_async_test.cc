// The loader onto AsyncDevice, whose copies complete later on other threads,
// out of order: a 256 MiB model of many storages lands byte for byte; a
// device whose Wait lies makes the ring reuse slots under copies in flight,
// and the digests catch it (the check the other tests rely on can fail);
// the digest of a transposed view in device memory reads its bytes back in
// large pieces, not one copy per element.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/testing/async_device.h"
#include "ptd/view_digest.h"
#include "ptd/weight_writer.h"
#include "tests/testing/loader_testing.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::TempDir;
using ::ptd::testing::TestModel;
using ::ptd::testing::WriteTestModel;

constexpr uint64_t kKiB = 1024, kMiB = kKiB * kKiB;

// Storage digests of a host load: the expected bytes.
std::vector<std::string> HostDigests(const BundlePaths& paths) {
  auto w = LoadWeights(paths, std::make_shared<HostDevice>());
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<std::string> out;
  if (!w.ok()) return out;
  for (const LoadedWeight& x : w->weights()) out.push_back(DigestLoadedWeight(*w, x).value());
  return out;
}

TEST(LoaderAsyncTest, A256MiBModelOfManyStoragesLandsByteForByte) {
  TempDir dir;
  // 1 KiB .. 3 MiB storages, 256 MiB in all: packed reads, whole-slot reads
  // and chunked ones.
  std::vector<uint64_t> sizes;
  const uint64_t pattern[] = {1 * kKiB, 3 * kMiB + 4, 64 * kKiB, 12,
                              1 * kMiB, 200 * kKiB,   2 * kMiB};
  uint64_t total = 0;
  for (size_t i = 0; total < 256 * kMiB; ++i) {
    const uint64_t n = std::min(pattern[i % std::size(pattern)], 256 * kMiB - total);
    const uint64_t rounded = std::max<uint64_t>(4, n / 4 * 4);
    sizes.push_back(rounded);
    total += rounded;
  }
  ASSERT_GT(sizes.size(), 250u);
  const TestModel m = WriteTestModel(dir.path(), sizes);
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  const std::vector<std::string> want = HostDigests(paths);
  ASSERT_EQ(want.size(), sizes.size());
  auto device = std::make_shared<AsyncDevice>(AsyncDeviceOptions{.seed = 256});
  {
    auto w = LoadWeights(paths, device, LoadOptions{.ring_slot_bytes = 2 * kMiB});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->stats().bytes, total);
    for (size_t i = 0; i < want.size(); ++i) {
      const LoadedStorage& s = w->storage(w->weights()[i]);
      EXPECT_FALSE(s.host_accessible);
      EXPECT_EQ(DigestLoadedStorage(*w, s).value(), want[i]) << m.fqns[i];
    }
  }
  const AsyncCounts c = device->counts();
  EXPECT_GT(c.out_of_order, 0u) << "the copies were not asynchronous";
  EXPECT_GT(c.max_in_flight, 1u);
  EXPECT_EQ(c.staging_freed_in_flight, 0u);
  EXPECT_EQ(device->stats().live_allocations, 0u);
  EXPECT_EQ(device->stats().live_staging_bytes, 0u);
}

TEST(LoaderAsyncTest, ABrokenWaitLoadsWrongBytesWhichDigestsCatch) {
  TempDir dir;
  const TestModel m = WriteTestModel(dir.path(), std::vector<uint64_t>(32, 64 * kKiB));
  const BundlePaths paths{.ptd = m.ptd, .manifest = m.manifest};
  const std::vector<std::string> want = HostDigests(paths);
  auto device = std::make_shared<AsyncDevice>();
  // Wait returns at once and no copy completes until its staging block
  // goes: every slot is refilled while its copies are still queued.
  device->set_broken_wait(true);
  device->Hold();
  auto w = LoadWeights(paths, device,
                       LoadOptions{.threads = 2, .ring_slots = 3, .ring_slot_bytes = 64 * kKiB});
  ASSERT_TRUE(w.ok()) << w.status();  // The load cannot tell...
  device->Release();
  size_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (DigestLoadedWeight(*w, w->weights()[i]).value() != want[i]) ++wrong;
  }
  EXPECT_GT(wrong, 0u) << "...but the digests must";
  EXPECT_GT(device->counts().staging_freed_in_flight, 0u);
}

TEST(LoaderAsyncTest, DigestOfATransposedViewReadsItsBytesBackInLargePieces) {
  TempDir dir;
  constexpr int64_t kRows = 1024, kCols = 1024;  // float32: 4 MiB.
  std::vector<uint8_t> bytes(kRows * kCols * 4);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + i / 4099);
  CudaWeightWriter writer("so_blob");
  const std::vector<int64_t> sizes = {kCols, kRows}, strides = {1, kCols};  // W.t()
  ASSERT_TRUE(writer
                  .Add(WeightSpec{.fqn = "w.t",
                                  .dtype = 6,
                                  .device_type = 1,
                                  .value = {.storage = bytes,
                                            .sizes = sizes,
                                            .strides = strides,
                                            .is_original_storage = true},
                                  .properties = {.offset = 0, .shape = sizes, .stride = strides}})
                  .ok());
  const BundlePaths paths{.ptd = dir.path() + "/t.ptd", .manifest = dir.path() + "/t.manifest"};
  ASSERT_TRUE(writer.Write(paths.ptd, *paths.manifest).ok());
  const std::vector<std::string> want = HostDigests(paths);
  ASSERT_EQ(want.size(), 1u);

  auto device = std::make_shared<AsyncDevice>();
  auto w = LoadWeights(paths, device);
  ASSERT_TRUE(w.ok()) << w.status();
  const LoadedWeight* t = w->Find("w.t");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->strides[0], 1);
  const uint64_t before = device->counts().copies_to_host;
  EXPECT_EQ(DigestLoadedWeight(*w, *t).value(), want[0]);
  const uint64_t calls = device->counts().copies_to_host - before;
  // The 4 MiB in pieces of kGatherWindowBytes (plus a little), where a
  // 4 KiB cache would take a copy for nearly every one of the 1M elements.
  EXPECT_LE(calls, bytes.size() / kGatherWindowBytes + 2);
  EXPECT_GE(calls, 1u);
}

}  // namespace
}  // namespace ptd
