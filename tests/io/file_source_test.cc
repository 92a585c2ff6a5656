// The read-only file seam: mmap, pread and in-memory sources agree byte for
// byte and fail the same way; ReadBytes hands out views or owned copies; and
// the readers report I/O failures part way through (FaultySource) under the
// rule whose read failed, with the I/O status's code.
#include "ptd/file_source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/program.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/faulty_source.h"
#include "tests/testing/pte_builder.h"
#include "tests/testing/raw_ptd.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::CodeIs;
using ::ptd::testing::FaultySource;
using ::ptd::testing::HasDiagnostic;
using ::ptd::testing::HasError;
using ::ptd::testing::MessageHas;
using ::ptd::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// The three kinds of source over the same bytes.
struct Sources {
  TempDir dir;
  std::vector<std::shared_ptr<const FileSource>> all;
  explicit Sources(const std::vector<uint8_t>& bytes) {
    const std::string path = dir.File("f.bin");
    ::ptd::testing::WriteFileBytes(path, bytes);
    all.push_back(std::shared_ptr<const FileSource>(*OpenMmapFile(path)));
    all.push_back(std::shared_ptr<const FileSource>(*OpenPreadFile(path)));
    all.push_back(MemorySource(bytes, path));
  }
};

TEST(FileSourceTest, MmapPreadAndMemoryAgree) {
  const std::vector<uint8_t> bytes = Pattern(5000);
  Sources s(bytes);
  for (const auto& src : s.all) {
    EXPECT_EQ(src->size(), bytes.size());
    EXPECT_EQ(src->name(), s.dir.File("f.bin"));
    for (const auto& [offset, len] :
         {std::pair<uint64_t, size_t>{0, 5000}, {0, 0}, {4999, 1}, {1234, 777}, {5000, 0}}) {
      std::vector<uint8_t> got(len, 0xEE);
      ASSERT_TRUE(src->ReadAt(offset, absl::MakeSpan(got)).ok()) << offset;
      EXPECT_EQ(got, std::vector<uint8_t>(bytes.begin() + offset, bytes.begin() + offset + len));
      absl::StatusOr<Bytes> b = ReadBytes(*src, offset, len);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(std::vector<uint8_t>(b->span().begin(), b->span().end()), got);
    }
  }
}

TEST(FileSourceTest, OutOfRangeReadsFailAlikeWithoutOverflow) {
  Sources s(Pattern(100));
  for (const auto& src : s.all) {
    std::vector<uint8_t> buf(10);
    EXPECT_EQ(src->ReadAt(95, absl::MakeSpan(buf)).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(src->ReadAt(~uint64_t{0} - 3, absl::MakeSpan(buf)).code(),
              absl::StatusCode::kOutOfRange);
    EXPECT_EQ(ReadBytes(*src, 101, 0).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(ReadBytes(*src, 50, ~uint64_t{0}).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_FALSE(src->View(95, 10).has_value());
  }
}

TEST(FileSourceTest, ReadBytesViewsWhereItCanAndCopiesOtherwise) {
  Sources s(Pattern(64));
  absl::StatusOr<Bytes> mmap = ReadBytes(*s.all[0], 8, 16);
  absl::StatusOr<Bytes> pread = ReadBytes(*s.all[1], 8, 16);
  absl::StatusOr<Bytes> memory = ReadBytes(*s.all[2], 8, 16);
  ASSERT_TRUE(mmap.ok() && pread.ok() && memory.ok());
  EXPECT_TRUE(mmap->borrowed());
  EXPECT_FALSE(pread->borrowed());
  EXPECT_TRUE(memory->borrowed());
  EXPECT_FALSE(s.all[1]->View(8, 16).has_value());
  // A moved owned copy keeps pointing at its own bytes.
  const std::vector<uint8_t> want(pread->span().begin(), pread->span().end());
  Bytes moved = *std::move(pread);
  EXPECT_EQ(std::vector<uint8_t>(moved.span().begin(), moved.span().end()), want);
}

TEST(FileSourceTest, OpenFailuresHaveTheirCodes) {
  TempDir dir;
  EXPECT_EQ(OpenMmapFile(dir.File("none")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenPreadFile(dir.File("none")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenMmapFile(dir.path()).status().code(), absl::StatusCode::kInvalidArgument);
  // An empty file opens (and has nothing to read).
  ::ptd::testing::WriteFileBytes(dir.File("empty"), {});
  for (bool mmap : {true, false}) {
    absl::StatusOr<std::unique_ptr<FileSource>> f =
        mmap ? OpenMmapFile(dir.File("empty")) : OpenPreadFile(dir.File("empty"));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->size(), 0u);
  }
}

// --- Fault injection --------------------------------------------------------

std::shared_ptr<FaultySource> Faulty(std::vector<uint8_t> bytes, const char* name) {
  return std::make_shared<FaultySource>(MemorySource(std::move(bytes), name));
}

TEST(FaultySourceTest, FailsOnlyTheNthRead) {
  auto src = Faulty(Pattern(32), "f.bin");
  src->FailReadAt(1, absl::UnavailableError("disk gone"));
  std::vector<uint8_t> buf(4);
  EXPECT_TRUE(src->ReadAt(0, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(src->ReadAt(0, absl::MakeSpan(buf)), absl::UnavailableError("disk gone"));
  EXPECT_TRUE(src->ReadAt(0, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(src->reads(), 3);
  EXPECT_FALSE(src->View(0, 4).has_value());
  src->set_views(true);
  EXPECT_TRUE(src->View(0, 4).has_value());
}

TEST(FaultySourceTest, ShortReadIsDataLoss) {
  auto src = Faulty(Pattern(32), "f.bin");
  src->ShortReadAt(0);
  std::vector<uint8_t> buf(8, 0);
  const absl::Status s = src->ReadAt(0, absl::MakeSpan(buf));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("4 of 8 bytes"));
  EXPECT_EQ(buf[3], Pattern(32)[3]);
  EXPECT_EQ(buf[4], 0);
}

TEST(FaultySourceTest, ContainerHeaderReadFailureIsH1WithTheIoCode) {
  auto src = Faulty(::ptd::testing::BuildRawPtd(::ptd::testing::ValidRawPtd()), "x.ptd");
  src->FailReadAt(0, absl::UnavailableError("x.ptd: EIO"));
  Report report;
  EXPECT_EQ(Container::Verify(src, &report), nullptr);
  EXPECT_THAT(report,
              HasError("H1", AllOf(CodeIs(absl::StatusCode::kUnavailable), MessageHas("EIO"))));
}

TEST(FaultySourceTest, ContainerFlatBufferShortReadIsC1DataLoss) {
  auto src = Faulty(::ptd::testing::BuildRawPtd(::ptd::testing::ValidRawPtd()), "x.ptd");
  src->ShortReadAt(1);  // After the header: the FlatBuffer.
  Report report;
  EXPECT_EQ(Container::Verify(src, &report), nullptr);
  EXPECT_THAT(report, HasDiagnostic("C1", absl::StatusCode::kDataLoss));
  EXPECT_THAT(
      Container::Open(Faulty(::ptd::testing::BuildRawPtd(::ptd::testing::ValidRawPtd()), "x.ptd"))
          .status(),
      absl::OkStatus());
}

TEST(FaultySourceTest, ContainerSegmentReadFailureReachesTheCaller) {
  auto src = Faulty(::ptd::testing::BuildRawPtd(::ptd::testing::ValidRawPtd()), "x.ptd");
  auto c = Container::Open(src);
  ASSERT_TRUE(c.ok()) << c.status();
  src->FailReadAt(src->reads(), absl::UnavailableError("x.ptd: EIO"));
  EXPECT_EQ((*c)->Get("b").status(), absl::UnavailableError("x.ptd: EIO"));
  EXPECT_TRUE((*c)->Get("b").ok());  // Only that read failed.
}

TEST(FaultySourceTest, ProgramHeaderReadFailureIsP1) {
  ::ptd::testing::PteSpec spec;
  spec.plans = {::ptd::testing::PtePlanSpec{"forward", {{.index = 0}}}};
  spec.segments = {::ptd::testing::ToBytes("ETCUDAFQN0 payload")};
  auto src = Faulty(::ptd::testing::BuildPte(spec), "m.pte");
  src->FailReadAt(0, absl::UnavailableError("m.pte: EIO"));
  Report report;
  EXPECT_EQ(Program::Verify(src, &report), nullptr);
  EXPECT_THAT(report, HasError("P1", AllOf(CodeIs(absl::StatusCode::kUnavailable),
                                           MessageHas("cannot read the extended header"))));
}

TEST(FaultySourceTest, ProgramPayloadReadFailureIsP2) {
  ::ptd::testing::PteSpec spec;
  spec.plans = {::ptd::testing::PtePlanSpec{"forward", {{.index = 0}}}};
  spec.segments = {::ptd::testing::ToBytes("ETCUDAFQN0 payload")};
  auto src = Faulty(::ptd::testing::BuildPte(spec), "m.pte");
  src->FailReadAt(2, absl::UnavailableError("m.pte: EIO"));  // Header, FlatBuffer, payloads.
  Report report;
  auto program = Program::Verify(src, &report);
  ASSERT_NE(program, nullptr);
  EXPECT_TRUE(program->cuda_delegates().empty());
  EXPECT_THAT(report, HasError("P2", AllOf(CodeIs(absl::StatusCode::kUnavailable),
                                           MessageHas("cannot read the CUDA payloads"))));
}

}  // namespace
}  // namespace ptd
