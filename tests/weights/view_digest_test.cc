// Tests of GatherView, DigestView and DigestRange against brute force, through
// a MemorySource (zero-copy views) and a pread file (the windowed path),
// including storages larger than the 1 MiB window.
#include "ptd/view_digest.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/file_source.h"
#include "ptd/scalar_type.h"
#include "ptd/sha256.h"

namespace ptd {
namespace {

using ::testing::HasSubstr;

struct View {
  uint32_t e = 4;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  ViewSpec spec() const {
    return ViewSpec{
        .element_size = e, .storage_offset = offset, .sizes = sizes, .strides = strides};
  }
};

// The view's elements in row-major order, one element at a time.
std::vector<uint8_t> BruteGather(const std::vector<uint8_t>& storage, const View& v) {
  std::vector<uint8_t> out;
  for (int64_t s : v.sizes) {
    if (s == 0) return out;
  }
  std::vector<int64_t> idx(v.sizes.size(), 0);
  while (true) {
    int64_t elem = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) elem += idx[d] * v.strides[d];
    const size_t at = static_cast<size_t>(elem) * v.e;
    out.insert(out.end(), storage.begin() + at, storage.begin() + at + v.e);
    size_t d = idx.size();
    while (d > 0 && ++idx[d - 1] == v.sizes[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// A file holding `prefix` bytes of junk, then `storage`; and both sources.
struct Sources {
  uint64_t base = 0;  // File offset of the storage.
  std::unique_ptr<FileSource> memory;
  std::unique_ptr<FileSource> pread;
};

Sources MakeSources(const std::vector<uint8_t>& storage, const std::string& name,
                    uint64_t prefix = 37) {
  std::vector<uint8_t> file = RandomBytes(prefix, 99);
  file.insert(file.end(), storage.begin(), storage.end());
  file.insert(file.end(), 11, 0xee);  // Bytes after the storage.
  const std::string path =
      ::testing::TempDir() + "/view_digest_test_" + std::to_string(::getpid()) + "_" + name;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
  }
  Sources s;
  s.base = prefix;
  s.memory = MemorySource(file, name);
  absl::StatusOr<std::unique_ptr<FileSource>> p = OpenPreadFile(path);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) s.pread = *std::move(p);
  std::filesystem::remove(path);                  // The open descriptor keeps the bytes.
  EXPECT_FALSE(s.pread->View(0, 1).has_value());  // Really the windowed path.
  return s;
}

// GatherView's output, checking that no chunk exceeds the window.
absl::StatusOr<std::vector<uint8_t>> Gather(const FileSource& source, uint64_t base,
                                            uint64_t nbytes, const View& v) {
  std::vector<uint8_t> out;
  bool chunk_too_big = false;
  const absl::Status s =
      GatherView(source, base, nbytes, v.spec(), [&](absl::Span<const uint8_t> chunk) {
        if (chunk.size() > kGatherWindowBytes) {
          chunk_too_big = true;
        }
        out.insert(out.end(), chunk.begin(), chunk.end());
      });
  if (!s.ok()) return s;
  EXPECT_FALSE(chunk_too_big);
  return out;
}

void ExpectGathersLikeBruteForce(const Sources& src, const std::vector<uint8_t>& storage,
                                 const View& v) {
  const std::vector<uint8_t> expected = BruteGather(storage, v);
  for (const FileSource* source : {src.memory.get(), src.pread.get()}) {
    SCOPED_TRACE(source == src.memory.get() ? "memory" : "pread");
    absl::StatusOr<std::vector<uint8_t>> got = Gather(*source, src.base, storage.size(), v);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), expected.size());
    ASSERT_TRUE(*got == expected);
    absl::StatusOr<std::string> digest = DigestView(*source, src.base, storage.size(), v.spec());
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, Sha256Hex(expected));
  }
}

TEST(ViewDigestTest, RandomViewsMatchBruteForce) {
  // Views reach at most (100 + 5 * 6 * 500 + 1) * 16 bytes.
  const std::vector<uint8_t> storage = RandomBytes(256 * 1024, 1);
  const Sources src = MakeSources(storage, "random.bin");
  std::mt19937_64 rng(0x5eed);
  for (int i = 0; i < 500; ++i) {
    View v;
    v.e = *ElementSize(std::uniform_int_distribution<int>(0, kNumScalarTypes - 1)(rng));
    v.offset = std::uniform_int_distribution<int64_t>(0, 100)(rng);
    const int ndim = std::uniform_int_distribution<int>(0, 5)(rng);
    for (int d = 0; d < ndim; ++d) {
      v.sizes.push_back(std::uniform_int_distribution<int64_t>(0, 7)(rng));
      v.strides.push_back(std::uniform_int_distribution<int64_t>(0, 50)(rng));
    }
    // Make some dims contiguous with the ones inside them, so that runs
    // coalesce (kept small so that every view fits the storage).
    int64_t acc = 1;
    for (size_t d = v.sizes.size(); d-- > 0;) {
      if (rng() % 3 == 0 && acc <= 500) v.strides[d] = acc;
      acc *= std::max<int64_t>(v.sizes[d], 1);
    }
    SCOPED_TRACE(::testing::Message() << "view " << i);
    ExpectGathersLikeBruteForce(src, storage, v);
  }
}

TEST(ViewDigestTest, NamedLayouts) {
  const std::vector<uint8_t> storage = RandomBytes(4096, 2);
  const Sources src = MakeSources(storage, "layouts.bin");
  const std::vector<View> views = {
      {4, 8, {3, 4}, {4, 1}},                // big[2:5]
      {4, 1, {8, 2}, {8, 1}},                // big[:, 1:3]
      {4, 0, {4, 8}, {1, 4}},                // Transposed.
      {4, 0, {2, 3, 4, 5}, {60, 1, 15, 3}},  // Channels-last.
      {4, 3, {}, {}},                        // 0-dim.
      {4, 0, {0, 4}, {4, 1}},                // Empty.
      {2, 5, {100, 3}, {0, 1}},              // Broadcast rows.
      {8, 0, {5, 1, 3}, {3, 1000, 1}},       // Size-1 dim, odd stride.
      {1, 0, {4, 5}, {1, 1}},                // Overlapping windows.
  };
  for (const View& v : views) ExpectGathersLikeBruteForce(src, storage, v);
}

TEST(ViewDigestTest, TransposedViewOfLargeStorageCrossesWindows) {
  // A 20000x16 float32 storage (1.28 MB > 1 MiB window), read transposed:
  // every output row walks the whole storage.
  constexpr int64_t kRows = 20000, kCols = 16;
  const std::vector<uint8_t> storage = RandomBytes(kRows * kCols * 4, 3);
  ASSERT_GT(storage.size(), kGatherWindowBytes);
  const Sources src = MakeSources(storage, "large.bin", 4093);
  ExpectGathersLikeBruteForce(src, storage, View{4, 0, {kCols, kRows}, {1, kCols}});
  // The contiguous whole, longer than one window, and a slice starting near
  // the window's end.
  ExpectGathersLikeBruteForce(src, storage, View{4, 0, {kRows, kCols}, {kCols, 1}});
  ExpectGathersLikeBruteForce(src, storage, View{4, 262140, {8, 3}, {kCols, 1}});
}

TEST(ViewDigestTest, LongBroadcastOutputIsChunked) {
  // 12 MB of output from a 4 KB storage.
  const std::vector<uint8_t> storage = RandomBytes(4000, 4);
  const Sources src = MakeSources(storage, "broadcast.bin");
  ExpectGathersLikeBruteForce(src, storage, View{4, 0, {3000, 1000}, {0, 1}});
}

TEST(ViewDigestTest, RejectsViewPastStorage) {
  const std::vector<uint8_t> storage = RandomBytes(48, 5);
  const Sources src = MakeSources(storage, "small.bin");
  absl::StatusOr<std::vector<uint8_t>> got =
      Gather(*src.memory, src.base, 48, View{4, 8, {3, 4}, {4, 1}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("80"));
  got = Gather(*src.pread, src.base, 48, View{4, 0, {3, 4}, {int64_t{1} << 62, 1}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ViewDigestTest, DigestRangeEqualsOneShotSha) {
  const std::vector<uint8_t> storage = RandomBytes(2 * kGatherWindowBytes + 12345, 6);
  const Sources src = MakeSources(storage, "range.bin", 100);
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 0},
      {0, 1},
      {17, 1000},
      {0, storage.size()},
      {kGatherWindowBytes - 3, kGatherWindowBytes + 7},
  };
  for (const auto& [offset, len] : ranges) {
    const std::string expected =
        Sha256Hex(absl::MakeConstSpan(storage.data() + offset, static_cast<size_t>(len)));
    for (const FileSource* source : {src.memory.get(), src.pread.get()}) {
      absl::StatusOr<std::string> d = DigestRange(*source, src.base + offset, len);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, expected) << offset << "+" << len;
    }
  }
  EXPECT_EQ(Sha256Hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace ptd
