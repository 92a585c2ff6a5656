#include "ptd/program.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/file_source.h"
#include "tests/testing/pte_builder.h"

namespace ptd {
namespace {

using ::ptd::testing::BuildPte;
using ::ptd::testing::PatchU32;
using ::ptd::testing::PatchU64;
using ::ptd::testing::PteSpec;
using ::ptd::testing::ReadU64;
using ::ptd::testing::ToBytes;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kManifestA[] = "ETCUDAFQN0 manifest of forward";
constexpr char kManifestB[] = "ETCUDAFQN0 manifest of decode, longer";

std::string ConformancePath(const std::string& name) {
  return std::string(PTD_TEST_DATA_DIR) + "/conformance/files/" + name;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string WriteTempFile(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = ::testing::TempDir() + "/program_test_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint8_t> Payload(const CudaDelegate& d) {
  return std::vector<uint8_t>(d.payload.span().begin(), d.payload.span().end());
}

struct Verified {
  Report report;
  std::unique_ptr<Program> program;
};

Verified VerifyBytes(std::vector<uint8_t> bytes) {
  Verified v;
  v.program = Program::Verify(MemorySource(std::move(bytes), "test.pte"), &v.report);
  return v;
}

// One method "forward" whose only delegate is CUDA with a segment payload.
PteSpec OneSegmentDelegate(std::string_view payload = kManifestA) {
  PteSpec spec;
  spec.plans = {{"forward", {{.location = 1, .index = 1}}}};
  spec.segments = {{}, ToBytes(payload), ToBytes("so blob bytes")};
  spec.named_data = {{"so_blob", 2}};
  return spec;
}

// ---- Well-formed programs ----

TEST(ProgramTest, ConformanceFileCarriesTheManifest) {
  for (bool mmap : {true, false}) {
    SCOPED_TRACE(mmap ? "mmap" : "pread");
    const std::string path = ConformancePath("k01_view_geometry.pte");
    auto source = mmap ? OpenMmapFile(path) : OpenPreadFile(path);
    ASSERT_TRUE(source.ok()) << source.status();
    Report report;
    auto program = Program::Verify(std::move(*source), &report);
    ASSERT_NE(program, nullptr);
    EXPECT_TRUE(report.ok()) << report.FirstError();
    EXPECT_THAT(report.warnings(), IsEmpty());
    EXPECT_EQ(program->header().header_length, 32u);
    EXPECT_EQ(program->header().program_size, 520u);
    EXPECT_EQ(program->header().segment_base_offset, 640u);
    EXPECT_EQ(program->header().segment_data_size, 1668u);
    EXPECT_THAT(program->named_data_keys(), ElementsAre("a1b2c3_so_blob"));
    ASSERT_EQ(program->cuda_delegates().size(), 1u);
    const CudaDelegate& d = program->cuda_delegates()[0];
    EXPECT_EQ(d.method, "forward");
    EXPECT_EQ(d.delegate_index, 0u);
    EXPECT_EQ(d.source, "pte:forward:0");
    EXPECT_TRUE(d.is_manifest);
    const std::vector<uint8_t> manifest = ReadFile(ConformancePath("k01_view_geometry.manifest"));
    ASSERT_EQ(manifest.size(), 1472u);
    EXPECT_EQ(Payload(d), manifest);
    EXPECT_EQ(d.payload.borrowed(), true);
  }
}

TEST(ProgramTest, ReadsSegmentPayloadFromMemory) {
  Verified v = VerifyBytes(BuildPte(OneSegmentDelegate()));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok()) << v.report.FirstError();
  EXPECT_THAT(v.report.warnings(), IsEmpty());
  ASSERT_EQ(v.program->cuda_delegates().size(), 1u);
  EXPECT_EQ(Payload(v.program->cuda_delegates()[0]), ToBytes(kManifestA));
  EXPECT_TRUE(v.program->cuda_delegates()[0].is_manifest);
  EXPECT_THAT(v.program->named_data_keys(), ElementsAre("so_blob"));
  EXPECT_EQ(v.program->path(), "test.pte");
}

TEST(ProgramTest, ReadsSegmentAndInlinePayloadsFromFiles) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates.push_back({.location = 0, .index = 1});
  spec.inline_data = {ToBytes("unused"), ToBytes(kManifestB)};
  const std::string path = WriteTempFile("files.pte", BuildPte(spec));
  for (bool mmap : {true, false}) {
    SCOPED_TRACE(mmap ? "mmap" : "pread");
    auto source = mmap ? OpenMmapFile(path) : OpenPreadFile(path);
    ASSERT_TRUE(source.ok()) << source.status();
    auto program = Program::Open(std::move(*source));
    ASSERT_TRUE(program.ok()) << program.status();
    const auto& delegates = (*program)->cuda_delegates();
    ASSERT_EQ(delegates.size(), 2u);
    EXPECT_EQ(Payload(delegates[0]), ToBytes(kManifestA));
    EXPECT_EQ(delegates[0].source, "pte:forward:0");
    EXPECT_EQ(Payload(delegates[1]), ToBytes(kManifestB));
    EXPECT_EQ(delegates[1].source, "pte:forward:1");
    EXPECT_TRUE(delegates[1].is_manifest);
  }
}

TEST(ProgramTest, PreadFileSharesOneCopyOfAPayload) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans.push_back({"decode", {{.location = 1, .index = 1}}});
  const std::string path = WriteTempFile("shared.pte", BuildPte(spec));
  auto source = OpenPreadFile(path);
  ASSERT_TRUE(source.ok()) << source.status();
  auto program = Program::Open(std::move(*source));
  ASSERT_TRUE(program.ok()) << program.status();
  const auto& delegates = (*program)->cuda_delegates();
  ASSERT_EQ(delegates.size(), 2u);
  EXPECT_EQ(delegates[0].payload.data(), delegates[1].payload.data());
  EXPECT_EQ(Payload(delegates[1]), ToBytes(kManifestA));
}

TEST(ProgramTest, ListsTheDelegatesOfEveryMethod) {
  PteSpec spec;
  spec.plans = {
      {"forward", {{.location = 1, .index = 0}}},
      {"decode",
       {{.id = "XnnpackBackend", .location = 0, .index = 0}, {.location = 1, .index = 1}}},
  };
  spec.inline_data = {ToBytes("xnnpack blob")};
  spec.segments = {ToBytes(kManifestA), ToBytes(kManifestB)};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok()) << v.report.FirstError();
  const auto& delegates = v.program->cuda_delegates();
  ASSERT_EQ(delegates.size(), 2u);
  EXPECT_EQ(delegates[0].method, "forward");
  EXPECT_EQ(delegates[0].delegate_index, 0u);
  EXPECT_EQ(delegates[0].source, "pte:forward:0");
  EXPECT_EQ(Payload(delegates[0]), ToBytes(kManifestA));
  EXPECT_EQ(delegates[1].method, "decode");
  EXPECT_EQ(delegates[1].delegate_index, 1u);
  EXPECT_EQ(delegates[1].source, "pte:decode:1");
  EXPECT_EQ(Payload(delegates[1]), ToBytes(kManifestB));
}

TEST(ProgramTest, ReadsShortHeaderWithoutSegmentDataSize) {
  PteSpec spec = OneSegmentDelegate();
  spec.header_length = 24;
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok()) << v.report.FirstError();
  EXPECT_EQ(v.program->header().header_length, 24u);
  EXPECT_FALSE(v.program->header().segment_data_size.has_value());
  ASSERT_EQ(v.program->cuda_delegates().size(), 1u);
}

// ---- P1 ----

// The extended header is optional (SPEC section 4): without "eh00" the
// program is the whole file and has no segment data.
TEST(ProgramTest, WithoutExtendedHeaderASegmentPayloadIsP2) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  bytes[testing::kPteMagicOffset + 3] = '1';
  const uint64_t size = bytes.size();
  Verified v = VerifyBytes(std::move(bytes));
  ASSERT_NE(v.program, nullptr);
  EXPECT_FALSE(v.program->header().present);
  EXPECT_EQ(v.program->header().program_size, size);
  EXPECT_FALSE(v.report.HasError("P1"));
  ASSERT_TRUE(v.report.HasError("P2"));
  EXPECT_THAT(v.report.errors()[0].message,
              AllOf(HasSubstr("segment 1"), HasSubstr("no extended header")));
  EXPECT_THAT(v.program->cuda_delegates(), IsEmpty());
}

TEST(ProgramTest, ReadsAProgramWithoutExtendedHeader) {
  // An inline payload needs no segment data: the header's bytes are not
  // part of the FlatBuffer's tables, so zeroing its magic leaves a program
  // that upstream's runtime loads as the whole file.
  PteSpec spec;
  spec.plans = {testing::PtePlanSpec{
      .name = "forward", .delegates = {testing::PteDelegateSpec{.location = 0, .index = 0}}}};
  spec.inline_data = {ToBytes(kManifestA)};
  std::vector<uint8_t> bytes = BuildPte(spec);
  std::fill(bytes.begin() + testing::kPteMagicOffset, bytes.begin() + testing::kPteMagicOffset + 4,
            0);
  Verified v = VerifyBytes(std::move(bytes));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok()) << v.report.FirstError();
  EXPECT_FALSE(v.program->header().present);
  ASSERT_EQ(v.program->cuda_delegates().size(), 1u);
  EXPECT_EQ(Payload(v.program->cuda_delegates()[0]), ToBytes(kManifestA));
}

TEST(ProgramTest, ReadsTheReleasedExporterProgramsWithoutHeader) {
  // executorch 1.5.1 writes a program with no delegate segment without the
  // extended header (tests/data/executorch/mlp.pte): P4 (no CUDA delegate),
  // no error.
  for (const char* name : {"mlp.pte", "mlp_xnnpack.pte"}) {
    auto source = OpenPreadFile(std::string(PTD_TEST_DATA_DIR) + "/executorch/" + name);
    ASSERT_TRUE(source.ok()) << source.status();
    Report report;
    const std::unique_ptr<Program> p = Program::Verify(*std::move(source), &report);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(report.ok()) << name << ": " << report.FirstError();
    EXPECT_TRUE(report.HasWarning("P4")) << name;
  }
}

TEST(ProgramTest, RejectsBadFileIdentifier) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  bytes[7] = '3';
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("'ET13'"));
}

TEST(ProgramTest, RejectsTooSmallFile) {
  Verified v = VerifyBytes(std::vector<uint8_t>(31, 0));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
}

TEST(ProgramTest, RejectsHeaderLengthUnder24) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  PatchU32(bytes, testing::kPteHeaderLengthOffset, 16);
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("16"));
}

TEST(ProgramTest, RejectsHeaderLengthPastEndOfFile) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  PatchU32(bytes, testing::kPteHeaderLengthOffset, 0xFFFFFFFFu);
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
}

TEST(ProgramTest, RejectsProgramSizePastEndOfFile) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  const uint64_t size = bytes.size();
  PatchU64(bytes, testing::kPteProgramSizeOffset, size + 1);
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P1"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr(std::to_string(size + 1)));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr(std::to_string(size)));
}

TEST(ProgramTest, RejectsHugeProgramSize) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  PatchU64(bytes, testing::kPteProgramSizeOffset, std::numeric_limits<uint64_t>::max());
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
}

TEST(ProgramTest, RejectsTruncatedFlatBuffer) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  const uint64_t program_size = ReadU64(bytes, testing::kPteProgramSizeOffset);
  PatchU64(bytes, testing::kPteProgramSizeOffset, program_size / 2);
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P1"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("verifier"));
}

TEST(ProgramTest, RejectsRootOffsetOutsideFlatBuffer) {
  std::vector<uint8_t> bytes = BuildPte(OneSegmentDelegate());
  PatchU32(bytes, 0, 0x7FFFFFF0u);
  Verified v = VerifyBytes(std::move(bytes));
  EXPECT_EQ(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
}

TEST(ProgramTest, RejectsSegmentPastEndOfFile) {
  PteSpec spec = OneSegmentDelegate();
  const uint64_t file_size = BuildPte(spec).size();
  spec.segment_table = {{0, 0}, {0, sizeof(kManifestA) - 1}, {256, file_size}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);  // The FlatBuffer itself is sound.
  ASSERT_TRUE(v.report.HasError("P1"));
  ASSERT_EQ(v.report.errors().size(), 1u);
  const Diagnostic& d = v.report.errors()[0];
  EXPECT_EQ(d.segment, 2u);
  EXPECT_EQ(d.code, absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.message, HasSubstr("segment 2"));
  EXPECT_THAT(d.message, HasSubstr(std::to_string(file_size)));
  // The CUDA delegate's own segment is fine.
  EXPECT_EQ(v.program->cuda_delegates().size(), 1u);
}

TEST(ProgramTest, RejectsOverflowingSegmentOffset) {
  PteSpec spec = OneSegmentDelegate();
  spec.segment_table = {{0, 0}, {std::numeric_limits<uint64_t>::max() - 4, 16}, {256, 13}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P1"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("overflows"));
  // The delegate that names the bad segment has no payload (P2).
  EXPECT_TRUE(v.report.HasError("P2"));
  EXPECT_THAT(v.program->cuda_delegates(), IsEmpty());
}

TEST(ProgramTest, ReportsEveryBadSegment) {
  PteSpec spec = OneSegmentDelegate();
  spec.segment_table = {
      {1u << 20, 1}, {0, sizeof(kManifestA) - 1}, {0, std::numeric_limits<uint64_t>::max()}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_EQ(v.report.errors().size(), 2u);
  EXPECT_EQ(v.report.errors()[0].segment, 0u);
  EXPECT_EQ(v.report.errors()[1].segment, 2u);
  EXPECT_EQ(v.program->cuda_delegates().size(), 1u);
}

// ---- P2 ----

TEST(ProgramTest, RejectsInlineIndexOutOfRange) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.location = 0, .index = 2}};
  spec.inline_data = {ToBytes(kManifestA)};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P2"));
  EXPECT_FALSE(v.report.HasError("P1"));
  const Diagnostic& d = v.report.errors()[0];
  EXPECT_EQ(d.message,
            "method 'forward' delegate 0: inline data 2 is out of range "
            "(1 entries) (P2)");
  EXPECT_EQ(d.source, "pte:forward:0");
  EXPECT_EQ(d.file, "test.pte");
  EXPECT_THAT(v.program->cuda_delegates(), IsEmpty());
  EXPECT_FALSE(v.report.HasWarning("P4"));  // There is a CUDA delegate.
}

TEST(ProgramTest, RejectsSegmentIndexOutOfRange) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans = {{"decode", {{.id = "Other"}, {.location = 1, .index = 3}}}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P2"));
  EXPECT_EQ(v.report.errors()[0].message,
            "method 'decode' delegate 1: segment 3 is out of range "
            "(3 segments) (P2)");
  EXPECT_EQ(v.report.errors()[0].source, "pte:decode:1");
  EXPECT_THAT(v.program->cuda_delegates(), IsEmpty());
}

TEST(ProgramTest, RejectsInlineEntryWithoutData) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.location = 0, .index = 0}};
  spec.inline_data = {std::nullopt};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P2"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("has no data"));
}

TEST(ProgramTest, RejectsEmptyPayloads) {
  // An empty payload is neither a manifest nor the legacy text form.
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.location = 0, .index = 0}, {.location = 1, .index = 0}};
  spec.inline_data = {std::vector<uint8_t>{}};  // Segment 0 is empty too.
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_EQ(v.report.errors().size(), 2u);
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("inline data 0 is empty (P2)"));
  EXPECT_THAT(v.report.errors()[1].message, HasSubstr("segment 0 is empty (P2)"));
  EXPECT_FALSE(v.report.HasWarning("P4"));
}

TEST(ProgramTest, RejectsUnknownDataLocation) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.location = 7, .index = 1}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_TRUE(v.report.HasError("P2"));
  EXPECT_THAT(v.report.errors()[0].message, HasSubstr("location 7"));
}

TEST(ProgramTest, RejectsDelegateWithoutProcessedReference) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.has_processed = false}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.HasError("P2"));
}

TEST(ProgramTest, ReportsEveryMissingPayload) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans = {{"forward", {{.location = 1, .index = 9}, {.location = 1, .index = 1}}},
                {"decode", {{.location = 0, .index = 0}}}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  ASSERT_EQ(v.report.errors().size(), 2u);
  EXPECT_EQ(v.report.errors()[0].source, "pte:forward:0");
  EXPECT_EQ(v.report.errors()[1].source, "pte:decode:0");
  ASSERT_EQ(v.program->cuda_delegates().size(), 1u);
  EXPECT_EQ(v.program->cuda_delegates()[0].source, "pte:forward:1");
}

// ---- P4 ----

TEST(ProgramTest, WarnsOnLegacyPayload) {
  Verified v = VerifyBytes(BuildPte(OneSegmentDelegate("so_key\nweights_key")));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok());
  ASSERT_TRUE(v.report.HasWarning("P4"));
  EXPECT_EQ(v.report.warnings()[0].source, "pte:forward:0");
  ASSERT_EQ(v.program->cuda_delegates().size(), 1u);
  EXPECT_FALSE(v.program->cuda_delegates()[0].is_manifest);
  EXPECT_EQ(Payload(v.program->cuda_delegates()[0]), ToBytes("so_key\nweights_key"));
}

TEST(ProgramTest, WarnsWhenNoCudaDelegate) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans = {{"forward", {{.id = "XnnpackBackend"}}}, {"decode", {}}};
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok());
  EXPECT_TRUE(v.report.HasWarning("P4"));
  EXPECT_THAT(v.program->cuda_delegates(), IsEmpty());
}

TEST(ProgramTest, WarnsWhenNoExecutionPlan) {
  PteSpec spec;
  Verified v = VerifyBytes(BuildPte(spec));
  ASSERT_NE(v.program, nullptr);
  EXPECT_TRUE(v.report.ok());
  EXPECT_TRUE(v.report.HasWarning("P4"));
}

// ---- Open ----

TEST(ProgramTest, OpenReturnsTheFirstError) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates = {{.location = 1, .index = 3}};
  auto program = Program::Open(MemorySource(BuildPte(spec), "bad.pte"));
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(program.status().message(), HasSubstr("bad.pte: "));
  EXPECT_THAT(program.status().message(), HasSubstr("(P2)"));
}

TEST(ProgramTest, OpenAcceptsWarnings) {
  auto program = Program::Open(MemorySource(BuildPte(OneSegmentDelegate("legacy")), "legacy.pte"));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ((*program)->path(), "legacy.pte");
}

// ---- Robustness: any input is reported, never crashes ----

TEST(ProgramTest, SurvivesEveryByteCorruptionAndTruncation) {
  PteSpec spec = OneSegmentDelegate();
  spec.plans[0].delegates.push_back({.location = 0, .index = 0});
  spec.inline_data = {ToBytes(kManifestB)};
  const std::vector<uint8_t> good = BuildPte(spec);
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= mask;
      Verified v = VerifyBytes(std::move(bad));
      if (v.program == nullptr) {
        EXPECT_FALSE(v.report.ok());
      }
    }
    Verified t = VerifyBytes(std::vector<uint8_t>(good.begin(), good.begin() + i));
    EXPECT_FALSE(t.report.ok() && t.program == nullptr);
  }
}

}  // namespace
}  // namespace ptd
