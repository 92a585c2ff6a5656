#include "ptd/ptd_writer.h"

#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ByteVector;
using ::ptd::testing::ConformanceCases;
using ::ptd::testing::ConformancePath;
using ::ptd::testing::CountEntries;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Container>> OpenBytes(std::vector<uint8_t> b) {
  return Container::Open(MemorySource(std::move(b), "written.ptd"));
}

TEST(PtdWriterTest, IdenticalBytesShareOneSegmentWithLcmAlignment) {
  PtdWriter w;
  ASSERT_TRUE(w.Add("x", ByteVector({1, 2, 3}), 1).ok());
  ASSERT_TRUE(w.Add("pad", ByteVector({9}), 1).ok());
  ASSERT_TRUE(w.Add("y", ByteVector({1, 2, 3}), 256).ok());
  EXPECT_EQ(w.num_keys(), 3u);
  EXPECT_EQ(w.num_segments(), 2u);
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok());
  auto c = OpenBytes(*bytes);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Find("x")->segment_index, (*c)->Find("y")->segment_index);
  // The shared segment is first; "pad" lands at lcm(128, 1) = 128.
  EXPECT_EQ((*c)->segments()[1].offset, 128u);
  EXPECT_EQ((*c)->header().segment_base_offset % 256, 0u);
}

TEST(PtdWriterTest, LayoutOfWrittenFileMatchesUpstream) {
  PtdWriter w(PtdWriterOptions{.segment_alignment = 16});
  ASSERT_TRUE(w.Add("a", std::vector<uint8_t>(10, 1), 16).ok());
  ASSERT_TRUE(w.Add("b", std::vector<uint8_t>(17, 2), 16).ok());
  ASSERT_TRUE(w.Add("c", std::vector<uint8_t>(3, 3), 64).ok());
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok());
  auto c = OpenBytes(*bytes);
  ASSERT_TRUE(c.ok()) << c.status();
  const PtdHeader& h = (*c)->header();
  EXPECT_EQ(h.header_length, 40u);
  EXPECT_EQ(h.flatbuffer_offset, 48u);
  EXPECT_EQ(h.segment_base_offset % 16, 0u);
  EXPECT_EQ(h.segment_base_offset, (48 + h.flatbuffer_size + 15) / 16 * 16);
  EXPECT_EQ((*c)->segments()[0].offset, 0u);
  EXPECT_EQ((*c)->segments()[1].offset, 16u);
  EXPECT_EQ((*c)->segments()[2].offset, 64u);
  EXPECT_EQ(h.segment_data_size, 67u);  // No padding after the last segment.
  EXPECT_EQ(bytes->size(), h.segment_base_offset + h.segment_data_size);
}

TEST(PtdWriterTest, RejectsBadInput) {
  PtdWriter w;
  EXPECT_EQ(w.Add("", ByteVector({1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Add("k\xFF", ByteVector({1})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Add("k", ByteVector({1}), 3).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.Add("k", ByteVector({1})).ok());
  EXPECT_TRUE(w.Add("k", ByteVector({1})).ok());  // The same again is a no-op.
  EXPECT_EQ(w.Add("k", ByteVector({2})).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status bad_layout =
      w.Add("t", std::vector<uint8_t>(8), 1,
            TensorLayout{.scalar_type = 6, .sizes = {3}, .dim_order = {0}});
  EXPECT_EQ(bad_layout.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_layout.message()), HasSubstr("(C8)"));
  PtdWriter odd(PtdWriterOptions{.segment_alignment = 48});
  EXPECT_EQ(odd.Serialize().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PtdWriterTest, RandomContentsRoundTrip) {
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 200; ++round) {
    const uint64_t seg_align = (rng() % 2) ? 128 : 16;
    PtdWriter w(PtdWriterOptions{.segment_alignment = seg_align});
    struct Want {
      std::string key;
      std::vector<uint8_t> bytes;
      uint64_t alignment;
      std::optional<TensorLayout> layout;
    };
    std::vector<Want> wants;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      Want want;
      want.key = "w." + std::to_string(round) + "." + std::to_string(i);
      const bool reuse = !wants.empty() && rng() % 4 == 0;
      if (reuse) {
        want.bytes = wants[rng() % wants.size()].bytes;
      } else {
        want.bytes.resize(rng() % 300);
        for (auto& b : want.bytes) b = static_cast<uint8_t>(rng());
      }
      want.alignment = uint64_t{1} << (rng() % 9);
      if (!want.bytes.empty() && rng() % 2) {
        want.layout = TensorLayout{
            .scalar_type = 0, .sizes = {static_cast<int32_t>(want.bytes.size())}, .dim_order = {0}};
      }
      ASSERT_TRUE(w.Add(want.key, want.bytes, want.alignment, want.layout).ok());
      wants.push_back(std::move(want));
    }
    auto bytes = w.Serialize();
    ASSERT_TRUE(bytes.ok());
    Report report;
    auto c = Container::Verify(MemorySource(*bytes, "rt.ptd"), &report);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(report.ok()) << report.FirstError();
    EXPECT_TRUE(report.warnings().empty());
    ASSERT_EQ(c->named_data().size(), wants.size());
    for (const Want& want : wants) {
      const NamedDataEntry* e = c->Find(want.key);
      ASSERT_NE(e, nullptr);
      auto got = c->Get(want.key);
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(std::vector<uint8_t>(got->span().begin(), got->span().end()), want.bytes);
      EXPECT_EQ(c->segments()[e->segment_index].offset % std::lcm(seg_align, want.alignment), 0u);
      ASSERT_EQ(e->layout != nullptr, want.layout.has_value());
      if (want.layout) {
        EXPECT_EQ(e->layout->sizes, want.layout->sizes);
      }
    }
  }
}

// The writer, given the keys, bytes, layouts, order and alignments of an
// upstream-written file, lays out the same segment data region byte for byte.
TEST(PtdWriterTest, SegmentRegionIsByteIdenticalToUpstreamForConformanceFiles) {
  int checked = 0;
  for (const auto& tc : ConformanceCases()) {
    if (tc["kind"] != "container" || tc["expect"] != "ok") continue;
    SCOPED_TRACE(tc["name"].get<std::string>());
    const std::vector<uint8_t> upstream = ReadFileBytes(ConformancePath(tc["ptd"]));
    auto orig = OpenBytes(upstream);
    ASSERT_TRUE(orig.ok()) << orig.status();
    PtdWriter w(PtdWriterOptions{.segment_alignment = tc["segment_alignment"]});
    for (const auto& nd : tc["named_data"]) {
      const std::string key = nd["key"];
      auto data = (*orig)->Get(key);
      ASSERT_TRUE(data.ok());
      std::optional<TensorLayout> layout;
      if (!nd["layout"].is_null()) {
        layout = TensorLayout{.scalar_type = nd["layout"]["scalar_type"].get<int32_t>(),
                              .sizes = nd["layout"]["sizes"].get<std::vector<int32_t>>(),
                              .dim_order = nd["layout"]["dim_order"].get<std::vector<uint8_t>>()};
      }
      ASSERT_TRUE(w.Add(key, data->span(), nd["alignment"].get<uint64_t>(), layout).ok());
    }
    auto mine = w.Serialize();
    ASSERT_TRUE(mine.ok());
    auto ours = OpenBytes(*mine);
    ASSERT_TRUE(ours.ok()) << ours.status();
    const PtdHeader& uh = (*orig)->header();
    const PtdHeader& oh = (*ours)->header();
    ASSERT_EQ(oh.segment_data_size, uh.segment_data_size);
    EXPECT_TRUE(std::equal(upstream.begin() + uh.segment_base_offset, upstream.end(),
                           mine->begin() + oh.segment_base_offset, mine->end()));
    ASSERT_EQ((*ours)->segments().size(), (*orig)->segments().size());
    for (size_t i = 0; i < (*ours)->segments().size(); ++i) {
      EXPECT_EQ((*ours)->segments()[i].offset, (*orig)->segments()[i].offset);
      EXPECT_EQ((*ours)->segments()[i].size, (*orig)->segments()[i].size);
    }
    for (const NamedDataEntry& e : (*orig)->named_data()) {
      EXPECT_EQ((*ours)->Find(e.key)->segment_index, e.segment_index);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(PtdWriterTest, WritesAtomically) {
  TempDir dir;
  const std::string path = dir.File("model.ptd");
  PtdWriter w;
  ASSERT_TRUE(w.Add("k", ByteVector({1, 2, 3})).ok());
  ASSERT_TRUE(w.Write(path).ok());
  auto c = Container::Open(std::shared_ptr<const FileSource>(*OpenMmapFile(path)));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(CountEntries(dir.path()), 1);  // No temporary left behind.
}

}  // namespace
}  // namespace ptd
