// Tests of WeightSet::Resolve: manifests against a .ptd (docs/SPEC.md
// sections 3 and 5: X1, G1-G5, X3). Containers are built in memory with
// PtdWriter; manifests as structs, or decoded from bytes where the decoder's
// verdict matters.
#include "ptd/weight_set.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/container.h"
#include "ptd/file_source.h"
#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/raw_ptd.h"

namespace ptd {
namespace {

using ::ptd::testing::ErrorRules;
using ::ptd::testing::HasError;
using ::ptd::testing::MessageHas;
using ::ptd::testing::SourceIs;

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed = 1) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// A container from key -> bytes, written by PtdWriter and opened from memory.
std::unique_ptr<Container> MakeContainer(
    const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  PtdWriter writer;
  for (const auto& [key, bytes] : entries) {
    absl::Status s = writer.Add(key, bytes);
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<std::vector<uint8_t>> file = writer.Serialize();
  EXPECT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<Container>> c =
      Container::Open(MemorySource(*std::move(file), "test.ptd"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// A view of a copy of `name` that lives until the tests end: the names of
// the entries below, which are built before the manifest that holds them.
std::string_view Kept(std::string_view name) {
  static NameArena* const arena = new NameArena;
  return arena->Keep(name);
}

WeightEntry Entry(std::string_view fqn, std::string_view key, uint64_t nbytes, int64_t offset,
                  DimVector sizes, DimVector strides, int32_t device_type = 1) {
  return WeightEntry{.fqn = Kept(fqn),
                     .storage_key = Kept(key),
                     .storage_nbytes = nbytes,
                     .dtype = 6,
                     .device_type = device_type,
                     .storage_offset = offset,
                     .sizes = std::move(sizes),
                     .strides = std::move(strides)};
}

Manifest OneVariant(std::vector<WeightEntry> entries) {
  Manifest m;
  m.variants.push_back(Variant{.so_blob_key = "so"});
  m.entries = std::move(entries);
  return m;
}

struct Resolved {
  std::vector<SourcedManifest> inputs;  // What `set` points into.
  Report report;
  WeightSet set;
};

Resolved Resolve(const Container& c, const std::vector<const Manifest*>& ms) {
  Resolved r;
  for (size_t i = 0; i < ms.size(); ++i) {
    r.inputs.push_back(
        {.source = i == 0 ? "manifest" : "pte:forward:" + std::to_string(i), .manifest = *ms[i]});
  }
  r.set = WeightSet::Resolve(c, r.inputs, &r.report);
  return r;
}

std::vector<std::string> WarningRules(const Report& r) {
  std::vector<std::string> rules;
  for (const Diagnostic& d : r.warnings()) rules.push_back(d.rule);
  return rules;
}

std::string All(const Report& r) { return ::ptd::testing::Describe(r); }

constexpr char kRows[] = "cuda_fqn_weight:cuda:layers.0.attn.rows";
constexpr char kQkv[] = "cuda_fqn_weight:cuda:layers.0.attn.qkv";

// --- A clean resolution ----------------------------------------------------

TEST(WeightSetTest, ResolvesSharedStorageWithoutDiagnostics) {
  // k02's shape: q, k, a transposed v and the whole matrix on one 192-byte key.
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest m = OneVariant({
      Entry("q", kQkv, 192, 0, {4, 4}, {4, 1}),
      Entry("k", kQkv, 192, 16, {4, 4}, {4, 1}),
      Entry("v", kQkv, 192, 32, {4, 4}, {1, 4}),
      Entry("qkv", kQkv, 192, 0, {12, 4}, {4, 1}),
  });
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(r.report.warnings(), IsEmpty()) << All(r.report);
  ASSERT_EQ(r.set.manifests().size(), 1u);
  const auto& ws = r.set.manifests()[0].weights;
  ASSERT_EQ(ws.size(), 4u);
  for (const ResolvedWeight& w : ws) {
    EXPECT_TRUE(w.ok) << w.entry->fqn;
    ASSERT_NE(w.named, nullptr);
    EXPECT_EQ(w.named->key, kQkv);
    ASSERT_TRUE(w.extent.has_value());
  }
  EXPECT_EQ(ws[0].extent->required_nbytes, 64u);
  EXPECT_EQ(ws[1].extent->required_nbytes, 128u);
  EXPECT_EQ(ws[2].extent->required_nbytes, 192u);
  EXPECT_EQ(ws[1].extent->first_byte, 64u);
  EXPECT_TRUE(WeightSet::Open(*c, {{.source = "manifest", .manifest = m}}).ok());
}

// --- X1 -----------------------------------------------------------------------

TEST(WeightSetTest, X1MissingStorageKey) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m =
      OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1}),
                  Entry("gone", "cuda_fqn_weight:cuda:gone", 48, 0, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("X1"));
  const Diagnostic& d = r.report.errors()[0];
  EXPECT_EQ(d.code, absl::StatusCode::kNotFound);
  EXPECT_THAT(d.message, HasSubstr("cuda_fqn_weight:cuda:gone"));
  EXPECT_EQ(d.fqn, "gone");
  EXPECT_EQ(d.key, "cuda_fqn_weight:cuda:gone");
  const auto& ws = r.set.manifests()[0].weights;
  EXPECT_TRUE(ws[0].ok);
  EXPECT_FALSE(ws[1].ok);
  EXPECT_EQ(ws[1].named, nullptr);
  absl::StatusOr<WeightSet> open = WeightSet::Open(*c, {{.source = "manifest", .manifest = m}});
  EXPECT_EQ(open.status().code(), absl::StatusCode::kNotFound);
}

// --- G1, G2 ------------------------------------------------------------------

TEST(WeightSetTest, G2ViewPastStorage) {
  // A compact clone of big[2:5] recorded with the original offset 8.
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 8, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G2"));
  EXPECT_EQ(r.report.errors()[0].message,
            "weight 'x.rows': view requires 80 bytes from a 48-byte storage (G2)");
  EXPECT_EQ(r.report.errors()[0].code, absl::StatusCode::kDataLoss);
  EXPECT_FALSE(r.set.manifests()[0].weights[0].ok);
  EXPECT_EQ(WeightSet::Open(*c, {{.source = "manifest", .manifest = m}}).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(WeightSetTest, G1OverflowingStrides) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 0, {3, 4}, {int64_t{1} << 62, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G1"));
  EXPECT_FALSE(r.set.manifests()[0].weights[0].extent.has_value());
  EXPECT_FALSE(r.set.manifests()[0].weights[0].ok);
}

// --- G3 -----------------------------------------------------------------------

TEST(WeightSetTest, G3SegmentSizeMismatch) {
  auto c = MakeContainer({{kRows, Pattern(40)}});
  // The manifest claims 48 bytes; the view fits 48 but not the 40 stored.
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 0, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G3"));
  const Diagnostic& d = r.report.errors()[0];
  EXPECT_THAT(d.message, AllOf(HasSubstr("40"), HasSubstr("48"), HasSubstr(kRows)));
  EXPECT_EQ(d.segment, 0u);
  EXPECT_FALSE(r.set.manifests()[0].weights[0].ok);
}

TEST(WeightSetTest, G3LargerSegmentThanManifestSays) {
  auto c = MakeContainer({{kRows, Pattern(64)}});
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 0, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G3"));
}

// --- G4, across two manifests of one run -----------------------------------------

TEST(WeightSetTest, G4StorageNbytesDisagreeAcrossManifests) {
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest a = OneVariant({Entry("q", kQkv, 192, 0, {4, 4}, {4, 1})});
  const Manifest b = OneVariant({Entry("q", kQkv, 128, 0, {4, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&a, &b});
  // b's entry also disagrees with the segment (G3); G4 names both numbers.
  EXPECT_THAT(r.report, HasError("G4", AllOf(MessageHas("128"), MessageHas("192"), MessageHas(kQkv),
                                             SourceIs("pte:forward:1"))))
      << All(r.report);
  EXPECT_TRUE(r.set.manifests()[0].weights[0].ok);
  EXPECT_FALSE(r.set.manifests()[1].weights[0].ok);
}

TEST(WeightSetTest, G4DeviceTypeDisagreeAcrossManifests) {
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest a = OneVariant({Entry("q", kQkv, 192, 0, {4, 4}, {4, 1}, 1)});
  const Manifest b = OneVariant({Entry("k", kQkv, 192, 16, {4, 4}, {4, 1}, 0)});
  const Resolved r = Resolve(*c, {&a, &b});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G4"));
  EXPECT_THAT(r.report.errors()[0].message,
              AllOf(HasSubstr("device_type 0"), HasSubstr("1"), HasSubstr("'q'")));
  EXPECT_FALSE(r.set.manifests()[1].weights[0].ok);
}

TEST(WeightSetTest, G4SameFqnInTwoManifestsAgreeing) {
  // Two manifests of one .pte may share fqns and storages.
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest a = OneVariant({Entry("q", kQkv, 192, 0, {4, 4}, {4, 1})});
  const Manifest b = OneVariant(
      {Entry("q", kQkv, 192, 0, {4, 4}, {4, 1}), Entry("rest", kQkv, 192, 16, {8, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&a, &b});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
}

// --- G5 -------------------------------------------------------------------------------

TEST(WeightSetTest, G5UnusedLeadingAndTrailingBytes) {
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  // Only k: bytes [64, 128) of 192.
  const Manifest m = OneVariant({Entry("k", kQkv, 192, 16, {4, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(WarningRules(r.report), ElementsAre("G5"));
  const Diagnostic& d = r.report.warnings()[0];
  EXPECT_THAT(d.message, AllOf(HasSubstr("64"), HasSubstr("128"), HasSubstr("192")));
  EXPECT_EQ(d.segment, 0u);
  EXPECT_EQ(d.key, kQkv);
}

TEST(WeightSetTest, G5OnlyTrailingBytes) {
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest m = OneVariant({Entry("q", kQkv, 192, 0, {4, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(WarningRules(r.report), ElementsAre("G5"));
}

TEST(WeightSetTest, G5NotReportedForStridedViewGaps) {
  // The compact clone of big[:, 1:3] (8x8 float): 232 bytes with row gaps.
  auto c = MakeContainer({{"cuda_fqn_weight:cuda:cols", Pattern(232)}});
  const Manifest m =
      OneVariant({Entry("cols", "cuda_fqn_weight:cuda:cols", 232, 0, {8, 2}, {8, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(r.report.warnings(), IsEmpty()) << All(r.report);
}

TEST(WeightSetTest, G5CountsViewsThroughEveryKeyOfASegment) {
  // Two keys with identical bytes share one segment; each key's view covers
  // one half, so together they reach every byte.
  const std::vector<uint8_t> bytes = Pattern(64);
  auto c = MakeContainer({{"cuda_fqn_weight:cuda:a", bytes}, {"cuda_fqn_weight:cuda:b", bytes}});
  ASSERT_EQ(c->segments().size(), 1u);
  const Manifest m = OneVariant({Entry("a", "cuda_fqn_weight:cuda:a", 64, 0, {8}, {1}),
                                 Entry("b", "cuda_fqn_weight:cuda:b", 64, 8, {8}, {1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(r.report.warnings(), IsEmpty()) << All(r.report);
}

TEST(WeightSetTest, G5SegmentReachedOnlyByEmptyViews) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({Entry("e", kRows, 48, 0, {0, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(WarningRules(r.report), ElementsAre("G5"));
}

// --- X3 --------------------------------------------------------------------------------

TEST(WeightSetTest, X3OrphanWeightKey) {
  auto c = MakeContainer({{kRows, Pattern(48)},
                          {"cuda_fqn_weight:cuda:orphan", Pattern(16, 9)},
                          {"so_blob", Pattern(32, 3)}});  // Not a weight key.
  const Manifest m = OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(WarningRules(r.report), ElementsAre("X3"));
  EXPECT_EQ(r.report.warnings()[0].key, "cuda_fqn_weight:cuda:orphan");
  EXPECT_THAT(r.report.warnings()[0].message, HasSubstr("cuda_fqn_weight:cuda:orphan"));
}

// A key the container holds twice (C6): both entries count as referenced
// when a manifest names the key, as a lookup by name would say.
TEST(WeightSetTest, X3NotReportedForTheSecondEntryOfADuplicatedKey) {
  const std::string x = "cuda_fqn_weight:cuda:x", y = "cuda_fqn_weight:cuda:y";
  testing::RawPtd raw;
  raw.segments = std::vector<testing::RawSegment>{{0, 24}, {128, 16}};
  raw.named_data = std::vector<testing::RawNamed>{{.key = x, .segment_index = 0},
                                                  {.key = y, .segment_index = 1},
                                                  {.key = x, .segment_index = 1}};
  raw.data = Pattern(144);
  Report container_report;
  auto c = Container::Verify(
      std::shared_ptr<const FileSource>(MemorySource(testing::BuildRawPtd(raw), "dup.ptd")),
      &container_report);
  ASSERT_NE(c, nullptr) << ::ptd::testing::Describe(container_report);
  EXPECT_THAT(ErrorRules(container_report), ElementsAre("C6"));
  const Manifest m = OneVariant({Entry("wx", x, 24, 0, {6}, {1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  ASSERT_THAT(WarningRules(r.report), ElementsAre("X3")) << All(r.report);
  EXPECT_THAT(r.report.warnings()[0].message, HasSubstr("'" + y + "'"));
}

TEST(WeightSetTest, X3NotReportedWithoutManifests) {
  auto c = MakeContainer({{"cuda_fqn_weight:cuda:orphan", Pattern(16)}});
  const Resolved r = Resolve(*c, {});
  EXPECT_TRUE(r.report.ok());
  EXPECT_THAT(r.report.warnings(), IsEmpty());
}

// --- Entries the decoder rejected ---------------------------------------------------

TEST(WeightSetTest, EntryWithM5ProblemsIsSkipped) {
  // Encode a valid manifest, then patch the last stride to -1 (M5). Its
  // segment is also too small and not referenced by size, so any G check
  // that ran would fire.
  Manifest valid = OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1}),
                               Entry("bad", "cuda_fqn_weight:cuda:bad", 48, 0, {3, 4}, {4, 1})});
  absl::StatusOr<std::vector<uint8_t>> bytes = EncodeManifest(valid);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  for (size_t i = bytes->size() - 8; i < bytes->size(); ++i) (*bytes)[i] = 0xff;

  Report report;
  const std::optional<Manifest> m =
      DecodeManifest(*bytes, Where{.file = "m", .source = "manifest"}, &report);
  ASSERT_TRUE(m.has_value());
  ASSERT_THAT(ErrorRules(report), ElementsAre("M5"));
  ASSERT_FALSE(m->entries[1].well_formed);

  auto c = MakeContainer({{kRows, Pattern(48)}, {"cuda_fqn_weight:cuda:bad", Pattern(8)}});
  const SourcedManifest input{.source = "manifest", .manifest = *m};
  const WeightSet set = WeightSet::Resolve(*c, {&input, 1}, &report);
  EXPECT_THAT(ErrorRules(report), ElementsAre("M5")) << All(report);
  const auto& ws = set.manifests()[0].weights;
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_TRUE(ws[0].ok);
  EXPECT_FALSE(ws[1].ok);
  EXPECT_FALSE(ws[1].extent.has_value());
  // Its key is still referenced by a manifest: no orphan warning.
  EXPECT_THAT(WarningRules(report), Not(Contains("X3"))) << All(report);
}

TEST(WeightSetTest, EntryWithDuplicateFqnIsSkipped) {
  Manifest m = OneVariant(
      {Entry("w", kRows, 48, 0, {3, 4}, {4, 1}), Entry("w", kRows, 40, 0, {3, 4}, {4, 1})});
  m.entries[1].well_formed = false;  // As the decoder marks an M6 duplicate.
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);  // No G3 or G4 for the skipped one.
}

// --- Conformance files -------------------------------------------------------------------

std::vector<uint8_t> ReadConformance(const std::string& name) {
  std::ifstream in(std::string(PTD_TEST_DATA_DIR) + "/conformance/files/" + name, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(WeightSetTest, ConformanceRejectsNameTheirRule) {
  const std::map<std::string, std::string> cases = {
      {"k10_clone_with_original_offset", "G2"}, {"k11_truncated_clone", "G2"},
      {"k12_storage_size_mismatch", "G3"},      {"k13_storage_key_missing", "X1"},
      {"k14_overflowing_strides", "G1"},
  };
  for (const auto& [name, rule] : cases) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Container>> c =
        Container::Open(MemorySource(ReadConformance(name + ".ptd"), name + ".ptd"));
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Manifest> m = ParseManifest(ReadConformance(name + ".manifest"));
    ASSERT_TRUE(m.ok()) << m.status();
    const Resolved r = Resolve(**c, {&*m});
    EXPECT_TRUE(r.report.HasError(rule)) << All(r.report);
  }
}

TEST(WeightSetTest, ConformanceOkCasesResolve) {
  for (const std::string name : {"k01_view_geometry", "k02_one_storage_key_many_views"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Container>> c =
        Container::Open(MemorySource(ReadConformance(name + ".ptd"), name + ".ptd"));
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<Manifest> m = ParseManifest(ReadConformance(name + ".manifest"));
    ASSERT_TRUE(m.ok()) << m.status();
    const Resolved r = Resolve(**c, {&*m});
    EXPECT_TRUE(r.report.ok()) << All(r.report);
    for (const ResolvedWeight& w : r.set.manifests()[0].weights) {
      EXPECT_TRUE(w.ok) << w.entry->fqn;
    }
  }
}

// --- Scale ---------------------------------------------------------------------------------

TEST(WeightSetTest, ResolvesHundredThousandEntries) {
  constexpr int kKeys = 100000;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> storages;
  Manifest m = OneVariant({});
  storages.reserve(kKeys);
  m.entries.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    const std::string fqn = "layers." + std::to_string(i) + ".w";
    const std::string key = "cuda_fqn_weight:cuda:" + fqn;
    std::vector<uint8_t> bytes(8);
    for (int b = 0; b < 4; ++b) bytes[b] = static_cast<uint8_t>(i >> (8 * b));
    storages.push_back({key, std::move(bytes)});
    m.entries.push_back(Entry(fqn, key, 8, 0, {2}, {1}));
  }
  auto c = MakeContainer(storages);
  ASSERT_NE(c, nullptr);
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << r.report.errors().front().message;
  EXPECT_THAT(r.report.warnings(), IsEmpty());
  ASSERT_EQ(r.set.manifests()[0].weights.size(), static_cast<size_t>(kKeys));
  EXPECT_TRUE(r.set.manifests()[0].weights.back().ok);
}

// A large manifest's diagnostics come in entry order, each weight's lookup
// and extent are its own (the key walk recovers after a missing key), and
// the first owner of a shared key is the earliest entry.
TEST(WeightSetTest, LargeManifestReportsInEntryOrderAcrossItsHalves) {
  constexpr int kKeys = 20000;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> storages;
  Manifest m = OneVariant({});
  for (int i = 0; i < kKeys; ++i) {
    const std::string fqn = "w" + std::to_string(i);
    const std::string key = "cuda_fqn_weight:cuda:" + fqn;
    storages.push_back({key, Pattern(8)});
    m.entries.push_back(Entry(fqn, key, 8, 0, {2}, {1}));
  }
  m.entries[3].sizes = {3};                                   // G2: 12 of 8 bytes.
  m.entries[9999].storage_key = "cuda_fqn_weight:cuda:gone";  // X1.
  m.entries[10000].strides = {int64_t{1} << 62};              // G1.
  m.entries[15000].storage_key = m.entries[2].storage_key;    // G4 with w2.
  m.entries[15000].storage_nbytes = 16;
  m.entries[19999].sizes = {3};  // G2.
  auto c = MakeContainer(storages);
  ASSERT_NE(c, nullptr);
  const Resolved r = Resolve(*c, {&m});
  std::vector<std::string> errors;
  for (const Diagnostic& d : r.report.errors())
    errors.push_back(d.rule + " " + d.fqn.value_or("-"));
  EXPECT_THAT(errors, ElementsAre("G2 w3", "X1 w9999", "G1 w10000", "G4 w15000", "G2 w19999"));
  EXPECT_THAT(r.report.errors()[3].message, HasSubstr("weight 'w2'"));
  std::vector<std::string> orphans;
  for (const Diagnostic& d : r.report.warnings())
    orphans.push_back(d.rule + " " + d.key.value_or("-"));
  EXPECT_THAT(orphans,
              ElementsAre("X3 cuda_fqn_weight:cuda:w9999", "X3 cuda_fqn_weight:cuda:w15000"));
  const std::vector<ResolvedWeight>& w = r.set.manifests()[0].weights;
  ASSERT_EQ(w.size(), static_cast<size_t>(kKeys));
  for (int i : {3, 9999, 10000, 15000, 19999}) EXPECT_FALSE(w[i].ok) << i;
  for (int i : {0, 2, 9998, 10001, 19998}) {
    EXPECT_TRUE(w[i].ok) << i;
    ASSERT_NE(w[i].named, nullptr);
    EXPECT_EQ(w[i].named->key, m.entries[i].storage_key);
    ASSERT_TRUE(w[i].extent.has_value());
    EXPECT_EQ(w[i].extent->required_nbytes, 8u);
  }
  EXPECT_FALSE(w[10000].extent.has_value());  // G1: no extent.
}

// --- Each cause once (issue 21's follow-on noise) ------------------------------

TEST(WeightSetTest, G4BreakIsNotReportedAgainAsG3) {
  auto c = MakeContainer({{kQkv, Pattern(192)}});
  const Manifest a = OneVariant({Entry("q", kQkv, 192, 0, {4, 4}, {4, 1})});
  const Manifest b = OneVariant({Entry("q", kQkv, 128, 0, {4, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&a, &b});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G4")) << All(r.report);
  EXPECT_FALSE(r.set.manifests()[1].weights[0].ok);
}

TEST(WeightSetTest, RejectedViewDrawsNoG5OnItsSegment) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  // G2: needs 80 bytes of 48. Its segment is then reached by no view, which
  // is a consequence, not a second finding.
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 8, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G2"));
  EXPECT_THAT(WarningRules(r.report), IsEmpty()) << All(r.report);
}

TEST(WeightSetTest, G3BreakDrawsNoG5) {
  auto c = MakeContainer({{kRows, Pattern(64)}});
  const Manifest m = OneVariant({Entry("x.rows", kRows, 48, 0, {3, 4}, {4, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G3"));
  EXPECT_THAT(WarningRules(r.report), IsEmpty()) << All(r.report);
}

TEST(WeightSetTest, ManifestErrorsNameTheManifestFile) {
  auto c = MakeContainer({{kRows, Pattern(48)}, {kQkv, Pattern(192)}});
  const Manifest a = OneVariant(
      {Entry("x.rows", kRows, 48, 8, {3, 4}, {4, 1}), Entry("q", kQkv, 192, 0, {4, 4}, {4, 1})});
  const Manifest b = OneVariant({Entry("k", kQkv, 128, 0, {4, 4}, {4, 1})});
  const std::vector<SourcedManifest> inputs = {
      {.source = "manifest", .manifest = a, .file = "w.manifest"},
      {.source = "pte:forward:0", .manifest = b, .file = "m.pte"}};
  Report report;
  (void)WeightSet::Resolve(*c, inputs, &report);
  EXPECT_THAT(report, HasError("G2", ::ptd::testing::FileIs("w.manifest"))) << All(report);
  EXPECT_THAT(report, HasError("G4", ::ptd::testing::FileIs("m.pte"))) << All(report);
}

TEST(WeightSetTest, CrossChecksNameTheContainer) {
  auto c = MakeContainer({{kRows, Pattern(40)}});
  const Manifest m =
      OneVariant({Entry("x.rows", kRows, 48, 0, {3, 4}, {4, 1}),
                  Entry("gone", "cuda_fqn_weight:cuda:gone", 48, 0, {3, 4}, {4, 1})});
  Report report;
  (void)WeightSet::Resolve(*c, {{.source = "manifest", .manifest = m, .file = "w.manifest"}},
                           &report);
  EXPECT_THAT(report, HasError("G3", ::ptd::testing::FileIs("test.ptd"))) << All(report);
  EXPECT_THAT(report, HasError("X1", ::ptd::testing::FileIs("test.ptd"))) << All(report);
}

// --- Runtime-owned entries (SPEC section 2) -----------------------------------

constexpr char kKvFqn[] = "__et_offgraph_kv_layer_0_k";
constexpr char kKvKey[] = "cuda_fqn_weight:cuda:__et_offgraph_kv_layer_0_k";

TEST(WeightSetTest, RuntimeOwnedEntryNeedsNoStoredKey) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1}),
                                 Entry(kKvFqn, kKvKey, 256, 0, {4, 16}, {16, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(r.report.warnings(), IsEmpty()) << All(r.report);
  const ResolvedWeight& kv = r.set.manifests()[0].weights[1];
  EXPECT_TRUE(kv.runtime_owned);
  EXPECT_TRUE(kv.ok);
  EXPECT_EQ(kv.named, nullptr);
  ASSERT_TRUE(kv.extent.has_value());
  EXPECT_EQ(kv.extent->required_nbytes, 256u);
  EXPECT_FALSE(r.set.manifests()[0].weights[0].runtime_owned);
}

TEST(WeightSetTest, RuntimeOwnedPrefixIsExactAndCaseSensitive) {
  // Near misses are ordinary weights: their missing keys are X1.
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({
      Entry("__et_offgraph_kv", "cuda_fqn_weight:cuda:a", 16, 0, {4}, {1}),
      Entry("__ET_OFFGRAPH_KV_layer", "cuda_fqn_weight:cuda:b", 16, 0, {4}, {1}),
      Entry("_et_offgraph_kv_layer", "cuda_fqn_weight:cuda:c", 16, 0, {4}, {1}),
      Entry("x.__et_offgraph_kv_layer", "cuda_fqn_weight:cuda:d", 16, 0, {4}, {1}),
      // The prefix on the key alone does not count either.
      Entry("e", "__et_offgraph_kv_e", 16, 0, {4}, {1}),
      Entry("__et_offgraph_kv_", "cuda_fqn_weight:cuda:f", 16, 0, {4}, {1}),
  });
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("X1", "X1", "X1", "X1", "X1")) << All(r.report);
  const auto& ws = r.set.manifests()[0].weights;
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(ws[i].runtime_owned) << ws[i].entry->fqn;
  EXPECT_TRUE(ws[5].runtime_owned);  // The bare prefix is one.
}

TEST(WeightSetTest, RuntimeOwnedViewStillChecked) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({
      Entry(kKvFqn, kKvKey, 0, 0, {4, 16}, {16, 1}),                          // G2
      Entry("__et_offgraph_kv_cells", "k2", 64, 0, {4}, {int64_t{1} << 62}),  // G1
  });
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(r.report, HasError("G2", MessageHas("requires 256 bytes from a 0-byte storage")))
      << All(r.report);
  EXPECT_THAT(r.report, HasError("G1")) << All(r.report);
  EXPECT_FALSE(r.set.manifests()[0].weights[0].ok);
  EXPECT_FALSE(r.set.manifests()[0].weights[1].ok);
  // No X1 for either, whatever their geometry.
  EXPECT_THAT(ErrorRules(r.report), Not(Contains("X1")));
}

TEST(WeightSetTest, RuntimeOwnedG1Overflow) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m = OneVariant({Entry(kKvFqn, kKvKey, 64, 0, {4, 4}, {int64_t{1} << 62, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G1")) << All(r.report);
  EXPECT_FALSE(r.set.manifests()[0].weights[0].ok);
}

TEST(WeightSetTest, RuntimeOwnedG4AmongSharers) {
  auto c = MakeContainer({{kRows, Pattern(48)}});
  const Manifest m =
      OneVariant({Entry(kKvFqn, kKvKey, 256, 0, {4, 16}, {16, 1}),
                  Entry("__et_offgraph_kv_layer_0_k2", kKvKey, 128, 0, {4, 8}, {8, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_THAT(ErrorRules(r.report), ElementsAre("G4")) << All(r.report);
}

TEST(WeightSetTest, R1RuntimeOwnedKeyStoredAnyway) {
  // A zero blob of another size than storage_nbytes: no G3, no X3, no G5.
  auto c = MakeContainer({{kRows, Pattern(48)}, {kKvKey, std::vector<uint8_t>(100, 0)}});
  const Manifest m = OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1}),
                                 Entry(kKvFqn, kKvKey, 256, 0, {4, 16}, {16, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(WarningRules(r.report), ElementsAre("R1")) << All(r.report);
  const Diagnostic& d = r.report.warnings()[0];
  EXPECT_THAT(d.message, AllOf(HasSubstr(kKvFqn), HasSubstr(kKvKey), HasSubstr("100 bytes")));
  EXPECT_EQ(d.key, kKvKey);
  EXPECT_EQ(d.fqn, kKvFqn);
  EXPECT_EQ(d.segment, 1u);
  EXPECT_EQ(d.message.substr(d.message.size() - 4), "(R1)");
}

TEST(WeightSetTest, RuntimeOwnedOnlyManifest) {
  auto c = MakeContainer({});
  const Manifest m = OneVariant(
      {Entry(kKvFqn, kKvKey, 256, 0, {4, 16}, {16, 1}),
       Entry("__et_offgraph_kv_layer_0_v", "cuda_fqn_weight:cuda:__et_offgraph_kv_layer_0_v", 256,
             0, {4, 16}, {16, 1})});
  const Resolved r = Resolve(*c, {&m});
  EXPECT_TRUE(r.report.ok()) << All(r.report);
  EXPECT_THAT(r.report.warnings(), IsEmpty());
  for (const ResolvedWeight& w : r.set.manifests()[0].weights) {
    EXPECT_TRUE(w.ok && w.runtime_owned) << w.entry->fqn;
  }
}

TEST(WeightSetTest, ResolveSizesNeverAsksForRuntimeOwnedKeys) {
  const Manifest m = OneVariant({Entry("rows", kRows, 48, 0, {3, 4}, {4, 1}),
                                 Entry(kKvFqn, kKvKey, 256, 0, {4, 16}, {16, 1})});
  std::vector<std::string> asked;
  Report report;
  const SourcedManifest in{.source = "manifest", .manifest = m};
  const WeightSet set = WeightSet::ResolveSizes(
      absl::MakeConstSpan(&in, 1),
      [&](std::string_view key) -> std::optional<uint64_t> {
        asked.emplace_back(key);
        return key == kRows ? std::optional<uint64_t>(48) : std::nullopt;
      },
      &report);
  EXPECT_TRUE(report.ok()) << All(report);
  EXPECT_THAT(asked, ElementsAre(kRows));
  EXPECT_TRUE(set.manifests()[0].weights[1].ok);
}

}  // namespace
}  // namespace ptd
