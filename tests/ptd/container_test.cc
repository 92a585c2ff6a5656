#include "ptd/container.h"

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/diagnostics.h"
#include "tests/testing/raw_ptd.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::BuildRawPtd;
using ::ptd::testing::CodeIs;
using ::ptd::testing::FileIs;
using ::ptd::testing::HasError;
using ::ptd::testing::MessageHas;
using ::ptd::testing::PatchU32;
using ::ptd::testing::PatchU64;
using ::ptd::testing::RawLayout;
using ::ptd::testing::RawNamed;
using ::ptd::testing::RawPtd;
using ::ptd::testing::RawSegment;
using ::ptd::testing::ValidRawPtd;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

std::shared_ptr<const FileSource> Source(std::vector<uint8_t> bytes) {
  return MemorySource(std::move(bytes), "test.ptd");
}

TEST(ContainerTest, OpensValidFileAndHandsOutSegmentBytes) {
  const RawPtd spec = ValidRawPtd();
  auto c = Container::Open(Source(BuildRawPtd(spec)));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->version(), 0u);
  ASSERT_EQ((*c)->segments().size(), 2u);
  ASSERT_EQ((*c)->named_data().size(), 3u);
  const NamedDataEntry* a = (*c)->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a->layout, nullptr);
  EXPECT_EQ(a->layout->sizes, (std::vector<int32_t>{2, 3}));
  auto bytes = (*c)->Get("c");  // Shares a's segment.
  ASSERT_TRUE(bytes.ok());
  EXPECT_TRUE(bytes->borrowed());  // A view into the in-memory source.
  ASSERT_EQ(bytes->size(), 24u);
  EXPECT_EQ(bytes->span()[0], 1);
  EXPECT_EQ(bytes->span()[23], 24);
  EXPECT_EQ((*c)->Find("missing"), nullptr);
  EXPECT_EQ((*c)->Get("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*c)->SegmentData(2).status().code(), absl::StatusCode::kOutOfRange);
}

// The key index holds views of the entries' (short, in-object) keys: a copy
// would read the original's memory after it died. A move hands the entries'
// buffer over whole, so it keeps working (the tests below run under ASan).
static_assert(!std::is_copy_constructible_v<Container>);
static_assert(!std::is_copy_assignable_v<Container>);
static_assert(std::is_nothrow_move_constructible_v<Container>);
static_assert(std::is_nothrow_move_assignable_v<Container>);

TEST(ContainerTest, FindKeepsWorkingAfterTheObjectMovesAndTheOriginalDies) {
  std::optional<Container> moved;
  std::optional<Container> assigned;
  {
    auto c = Container::Open(Source(BuildRawPtd(ValidRawPtd())));
    ASSERT_TRUE(c.ok()) << c.status();
    moved.emplace(std::move(**c));  // Move construction.
    auto d = Container::Open(Source(BuildRawPtd(ValidRawPtd())));
    ASSERT_TRUE(d.ok()) << d.status();
    assigned.emplace(std::move(**d));
    *assigned = std::move(*moved);  // Move assignment over a live container.
    moved.emplace(std::move(*assigned));
    // Both originals (and the moved-from optional's object) die here.
    assigned.reset();
  }
  for (const char* key : {"a", "b", "c"}) {
    const NamedDataEntry* e = moved->Find(key);
    ASSERT_NE(e, nullptr) << key;
    EXPECT_EQ(e->key, key);
  }
  auto bytes = moved->Get("b");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->span()[0], 0xA0);
}

TEST(ContainerTest, FindKeepsWorkingWhenThePointerMovesAndTheSourceIsGone) {
  std::unique_ptr<Container> moved;
  {
    auto c = Container::Open(Source(BuildRawPtd(ValidRawPtd())));
    ASSERT_TRUE(c.ok()) << c.status();
    moved = std::move(*c);  // The way to hand a Container on.
  }
  // Short keys ("a", "b", "c") live inside their std::string objects.
  const NamedDataEntry* b = moved->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->key, "b");
  EXPECT_EQ(b->segment_index, 1u);
  auto bytes = moved->Get("b");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->span()[0], 0xA0);
}

TEST(ContainerTest, PreadSourceReturnsOwnedCopies) {
  ::ptd::testing::TempDir dir;
  const std::string path = dir.File("x.ptd");
  ::ptd::testing::WriteFileBytes(path, BuildRawPtd(ValidRawPtd()));
  auto src = OpenPreadFile(path);
  ASSERT_TRUE(src.ok());
  auto c = Container::Open(std::shared_ptr<const FileSource>(std::move(*src)));
  ASSERT_TRUE(c.ok()) << c.status();
  auto bytes = (*c)->Get("b");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(bytes->borrowed());
  ASSERT_EQ(bytes->size(), 16u);
  EXPECT_EQ(bytes->span()[15], 0xAF);
}

// One named corruption: how to break a valid file, and what must be said.
struct Corruption {
  std::string name;
  std::function<std::vector<uint8_t>()> make;
  std::string rule;
  absl::StatusCode code = absl::StatusCode::kDataLoss;
  std::string message_part;  // Both numbers, or the place.
};

void PrintTo(const Corruption& c, std::ostream* os) { *os << c.name; }

std::vector<uint8_t> Valid() { return BuildRawPtd(ValidRawPtd()); }

std::vector<uint8_t> WithSpec(const std::function<void(RawPtd&)>& edit) {
  RawPtd p = ValidRawPtd();
  edit(p);
  return BuildRawPtd(p);
}

std::vector<uint8_t> Patched64(size_t at, uint64_t v) {
  auto b = Valid();
  PatchU64(b, at, v);
  return b;
}

std::vector<Corruption> Corruptions() {
  using ::ptd::testing::kFlatbufferSizeAt;
  using ::ptd::testing::kHeaderLengthAt;
  using ::ptd::testing::kSegmentBaseAt;
  using ::ptd::testing::kSegmentDataSizeAt;
  return {
      {"H1_FileShorterThan64Bytes",
       [] {
         auto b = Valid();
         b.resize(63);
         return b;
       },
       "H1", absl::StatusCode::kDataLoss, "63 bytes"},
      {"H2_FlatBufferIdentifier",
       [] {
         auto b = Valid();
         b[4] = 'X';
         return b;
       },
       "H2", absl::StatusCode::kDataLoss, "FT01"},
      {"H2_ExtendedHeaderMagic",
       [] {
         auto b = Valid();
         b[11] = '9';
         return b;
       },
       "H2", absl::StatusCode::kDataLoss, "FH09"},
      {"H3_HeaderLengthBelow40",
       [] {
         auto b = Valid();
         PatchU32(b, kHeaderLengthAt, 39);
         return b;
       },
       "H3", absl::StatusCode::kDataLoss, "header length 39 is less than 40"},
      {"H3_HeaderLengthPastFlatbufferOffset",
       [] {
         auto b = Valid();
         PatchU32(b, kHeaderLengthAt, 56);
         return b;
       },
       "H3", absl::StatusCode::kDataLoss, "header length 56 exceeds flatbuffer_offset 48"},
      {"H4_FlatbufferSizeOverflows", [] { return Patched64(kFlatbufferSizeAt, kMax64 - 8); }, "H4",
       absl::StatusCode::kDataLoss, "overflows"},
      {"H4_FlatbufferRegionOver2GiB",
       [] { return Patched64(kFlatbufferSizeAt, uint64_t{1} << 31); }, "H4",
       absl::StatusCode::kDataLoss, "2^31"},
      {"H4_FlatbufferRegionAtFlatbuffersLimit",  // 2^31 - 1: FlatBuffers' own bound.
       [] { return Patched64(kFlatbufferSizeAt, (uint64_t{1} << 31) - 1 - 48); }, "H4",
       absl::StatusCode::kDataLoss, "2147483647"},
      {"H4_FlatbufferPastSegmentBase", [] { return Patched64(kSegmentBaseAt, 64); }, "H4",
       absl::StatusCode::kDataLoss, "after segment_base_offset 64"},
      {"H4_DataRegionPastEndOfFile",
       [] {
         auto b = Valid();
         b.resize(b.size() - 10);
         return b;
       },
       "H4", absl::StatusCode::kDataLoss, "exceeds the file size"},
      {"H4_DataRegionOverflows", [] { return Patched64(kSegmentDataSizeAt, kMax64); }, "H4",
       absl::StatusCode::kDataLoss, "overflows"},
      {"C1_RootOffsetOutOfRange",
       [] {
         auto b = Valid();
         PatchU32(b, 0, 0x7FFFFFF0);
         return b;
       },
       "C1", absl::StatusCode::kDataLoss, "FlatBuffers verifier"},
      {"C1_GarbageTable",
       [] {
         auto b = Valid();
         for (size_t i = 60; i < 90; ++i) b[i] = 0xFF;
         return b;
       },
       "C1", absl::StatusCode::kDataLoss, "FlatBuffers verifier"},
      {"C2_NewerVersion", [] { return WithSpec([](RawPtd& p) { p.version = 1; }); }, "C2",
       absl::StatusCode::kUnimplemented, "version 1"},
      {"C3_SegmentsMissing", [] { return WithSpec([](RawPtd& p) { p.segments.reset(); }); }, "C3",
       absl::StatusCode::kDataLoss, "segments"},
      {"C3_NamedDataMissing", [] { return WithSpec([](RawPtd& p) { p.named_data.reset(); }); },
       "C3", absl::StatusCode::kDataLoss, "named_data"},
      {"C4_SegmentPastDataRegion",
       [] { return WithSpec([](RawPtd& p) { (*p.segments)[1].size = 17; }); }, "C4",
       absl::StatusCode::kDataLoss, "offset 128 + size 17 exceeds segment_data_size 144"},
      {"C4_SegmentOffsetOverflows",
       [] { return WithSpec([](RawPtd& p) { (*p.segments)[1].offset = kMax64; }); }, "C4",
       absl::StatusCode::kDataLoss, "segment 1"},
      {"C5_SegmentsOutOfOrder",
       [] {
         return WithSpec([](RawPtd& p) {
           p.segments = std::vector<RawSegment>{{128, 16}, {0, 24}};
         });
       },
       "C5", absl::StatusCode::kDataLoss,
       "segment 1 starts at 0, before the end of segment 0 at 144"},
      {"C5_SegmentsOverlap",
       [] { return WithSpec([](RawPtd& p) { (*p.segments)[0].size = 130; }); }, "C5",
       absl::StatusCode::kDataLoss, "starts at 128, before the end of segment 0 at 130"},
      {"C6_KeyMissing", [] { return WithSpec([](RawPtd& p) { (*p.named_data)[1].key.reset(); }); },
       "C6", absl::StatusCode::kDataLoss, "named_data[1] has no key"},
      {"C6_KeyEmpty", [] { return WithSpec([](RawPtd& p) { (*p.named_data)[1].key = ""; }); }, "C6",
       absl::StatusCode::kDataLoss, "empty key"},
      {"C6_KeyNotUtf8",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[1].key = "b\xC3("; }); }, "C6",
       absl::StatusCode::kDataLoss, "UTF-8"},
      {"C6_KeyDuplicated", [] { return WithSpec([](RawPtd& p) { (*p.named_data)[2].key = "a"; }); },
       "C6", absl::StatusCode::kDataLoss, "'a' appears more than once (entries 0 and 2)"},
      {"C7_SegmentIndexOutOfRange",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[1].segment_index = 2; }); }, "C7",
       absl::StatusCode::kDataLoss, "segment_index 2 is out of range (2 segments)"},
      {"C8_UnknownScalarType",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[0].layout->scalar_type = 30; }); },
       "C8", absl::StatusCode::kDataLoss, "unknown scalar type 30"},
      {"C8_NegativeSize",
       [] { return WithSpec([](RawPtd& p) {
              (*p.named_data)[0].layout->sizes = {{2, -3}};
            }); },
       "C8", absl::StatusCode::kDataLoss, "sizes[1] is -3"},
      {"C8_SizesMissing",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[0].layout->sizes.reset(); }); }, "C8",
       absl::StatusCode::kDataLoss, "no sizes"},
      {"C8_DimOrderMissing",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[0].layout->dim_order.reset(); }); },
       "C8", absl::StatusCode::kDataLoss, "no dim_order"},
      {"C8_DimOrderLengthMismatch",
       [] { return WithSpec([](RawPtd& p) { (*p.named_data)[0].layout->dim_order = {{0}}; }); },
       "C8", absl::StatusCode::kDataLoss, "dim_order has 1 entries, sizes has 2"},
      {"C8_DimOrderNotPermutation",
       [] { return WithSpec([](RawPtd& p) {
              (*p.named_data)[0].layout->dim_order = {{1, 1}};
            }); },
       "C8", absl::StatusCode::kDataLoss, "not a permutation"},
      {"C8_LayoutLargerThanSegment",
       [] { return WithSpec([](RawPtd& p) {
              (*p.named_data)[0].layout->sizes = {{2, 4}};
            }); },
       "C8", absl::StatusCode::kDataLoss, "layout needs 32 bytes, segment 0 holds 24"},
      {"C8_LayoutByteSizeOverflows",
       [] {
         return WithSpec([](RawPtd& p) {
           (*p.named_data)[0].layout->sizes = {{1 << 30, 1 << 30, 1 << 30}};
           (*p.named_data)[0].layout->dim_order = {{0, 1, 2}};
         });
       },
       "C8", absl::StatusCode::kDataLoss, "overflows"},
  };
}

class ContainerCorruptionTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(ContainerCorruptionTest, ReportsTheBrokenRule) {
  const Corruption& c = GetParam();
  Report report;
  Container::Verify(Source(c.make()), &report);
  EXPECT_THAT(report,
              HasError(c.rule, AllOf(CodeIs(c.code), FileIs("test.ptd"), MessageHas(c.message_part),
                                     MessageHas("(" + c.rule + ")"))))
      << c.name;

  // Open() fails with the first error, naming the file.
  auto opened = Container::Open(Source(c.make()));
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("test.ptd: "));
  EXPECT_EQ(opened.status(), report.FirstError());
}

INSTANTIATE_TEST_SUITE_P(Rules, ContainerCorruptionTest, ::testing::ValuesIn(Corruptions()),
                         [](const ::testing::TestParamInfo<Corruption>& p) {
                           return p.param.name;
                         });

TEST(ContainerTest, TrailingBytesAreWarningH5) {
  auto b = Valid();
  b.resize(b.size() + 7, 0);
  Report report;
  auto c = Container::Verify(Source(b), &report);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(report.ok());
  EXPECT_TRUE(report.HasWarning("H5"));
  EXPECT_THAT(report.warnings()[0].message, HasSubstr("7 trailing bytes"));
}

TEST(ContainerTest, ReportsEveryErrorNotOnlyTheFirst) {
  auto b = WithSpec([](RawPtd& p) {
    p.version = 3;
    (*p.named_data)[1].segment_index = 9;
    (*p.named_data)[2].key = "a";
  });
  Report report;
  auto c = Container::Verify(Source(b), &report);
  ASSERT_NE(c, nullptr);  // Sound enough to go on.
  EXPECT_TRUE(report.HasError("C2"));
  EXPECT_TRUE(report.HasError("C7"));
  EXPECT_TRUE(report.HasError("C6"));
  EXPECT_EQ(report.errors().size(), 3u);
}

// The entries are decoded first (C7, C8 in entry order), then indexed: a
// duplicated key (C6) follows them, as M6 follows M5 in a manifest, and the
// index finds the key's first entry.
TEST(ContainerTest, DuplicateKeysAreReportedAfterTheEntryRules) {
  auto b = WithSpec([](RawPtd& p) {
    (*p.named_data)[0].layout->scalar_type = 30;
    (*p.named_data)[1].key = "a";
    (*p.named_data)[2].segment_index = 9;
  });
  Report report;
  auto c = Container::Verify(Source(b), &report);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> rules;
  for (const auto& e : report.errors()) rules.push_back(e.rule);
  EXPECT_THAT(rules, ElementsAre("C8", "C7", "C6"));
  EXPECT_THAT(report.errors()[2].message, HasSubstr("(entries 0 and 1)"));
  EXPECT_EQ(c->Find("a"), &c->named_data()[0]);
  EXPECT_FALSE(c->AllKeysIndexed());
}

TEST(ContainerTest, StopsAfterC1) {
  auto b = Valid();
  PatchU32(b, 0, 0x7FFFFFF0);
  Report report;
  EXPECT_EQ(Container::Verify(Source(b), &report), nullptr);
  EXPECT_EQ(report.errors().size(), 1u);
}

TEST(ContainerTest, ShortFileStillChecksTheFlatBufferButRefusesLostSegments) {
  auto b = Valid();
  b.resize(b.size() - 10);  // Cuts into segment 1 only.
  Report report;
  auto c = Container::Verify(Source(b), &report);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(report.HasError("H4"));
  EXPECT_TRUE(c->SegmentData(0).ok());
  EXPECT_EQ(c->SegmentData(1).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ContainerTest, EmptySegmentMaySitAtTheNextOffset) {
  auto b = WithSpec([](RawPtd& p) {
    p.segments = std::vector<RawSegment>{{0, 24}, {128, 0}, {128, 16}};
    (*p.named_data)[1].segment_index = 2;
    p.named_data->push_back({"empty", 1, std::nullopt});
  });
  auto c = Container::Open(Source(b));
  ASSERT_TRUE(c.ok()) << c.status();
  auto e = (*c)->Get("empty");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 0u);
}

TEST(ContainerTest, ConformanceFilesOpenThroughEverySource) {
  for (const auto& tc : ::ptd::testing::ConformanceCases()) {
    if (tc["kind"] != "container" || tc["expect"] != "ok") continue;
    const std::string path = ::ptd::testing::ConformancePath(tc["ptd"]);
    auto mm = OpenMmapFile(path);
    auto pr = OpenPreadFile(path);
    ASSERT_TRUE(mm.ok() && pr.ok());
    for (std::shared_ptr<const FileSource> src :
         {std::shared_ptr<const FileSource>(std::move(*mm)),
          std::shared_ptr<const FileSource>(std::move(*pr)),
          std::shared_ptr<const FileSource>(
              MemorySource(::ptd::testing::ReadFileBytes(path), path))}) {
      auto c = Container::Open(src);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ((*c)->named_data().size(), tc["named_data"].size());
      // Alignment is not stored; what is observed is a multiple of it.
      EXPECT_EQ((*c)->ObservedSegmentAlignment() % tc["segment_alignment"].get<uint64_t>(), 0u);
      for (const auto& nd : tc["named_data"]) {
        auto bytes = (*c)->Get(nd["key"].get<std::string>());
        ASSERT_TRUE(bytes.ok());
        EXPECT_EQ(bytes->size(), nd["size"].get<uint64_t>());
      }
    }
  }
}

TEST(ContainerTest, MissingFileIsNotFound) {
  EXPECT_EQ(OpenMmapFile("/nonexistent/x.ptd").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenPreadFile("/nonexistent/x.ptd").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ptd
