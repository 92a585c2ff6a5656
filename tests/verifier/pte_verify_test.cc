// ptd-verify over a .pte: every CUDA delegate's manifest checked against the
// .ptd (SPEC section 4), including P3 and weights shared between methods.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/manifest.h"
#include "ptd/ptd_writer.h"
#include "ptd/verify.h"
#include "runtime/verify/verify_json.h"
#include "tests/testing/diagnostics.h"
#include "tests/testing/pte_builder.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::BuildPte;
using ::ptd::testing::HasError;
using ::ptd::testing::MessageHas;
using ::ptd::testing::PtePlanSpec;
using ::ptd::testing::PteSpec;
using ::ptd::testing::SourceIs;
using ::ptd::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKey[] = "cuda_fqn_weight:cuda:shared.w";

std::vector<uint8_t> ManifestBytes(const std::string& so_key, const std::string& fqn,
                                   uint64_t storage_nbytes,
                                   ManifestFormat format = ManifestFormat::kFqn0) {
  Manifest m;
  m.format = format;
  m.variants.push_back(Variant{.so_blob_key = so_key});
  m.entries.push_back(WeightEntry{.fqn = m.KeepName(fqn),
                                  .storage_key = kKey,
                                  .storage_nbytes = storage_nbytes,
                                  .dtype = 6,
                                  .device_type = 1,
                                  .storage_offset = 0,
                                  .sizes = {2, 4},
                                  .strides = {4, 1}});
  auto bytes = EncodeManifest(m);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return *bytes;
}

// A .ptd holding the shared 32-byte storage (and, optionally, the library).
std::string WritePtd(const TempDir& dir, bool with_library) {
  PtdWriter w;
  EXPECT_TRUE(w.Add(kKey, std::vector<uint8_t>(32, 3)).ok());
  if (with_library) {
    EXPECT_TRUE(w.Add("lib_so", std::vector<uint8_t>(8, 1)).ok());
  }
  const std::string path = dir.File("model.ptd");
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

// Two methods, each with one CUDA delegate (the second method's delegate is
// its second delegate), both naming the same storage.
std::string WritePte(const TempDir& dir, uint64_t decode_nbytes,
                     std::vector<std::pair<std::string, uint32_t>> named = {}) {
  PteSpec spec;
  spec.plans = {PtePlanSpec{"forward", {{.index = 0}}},
                PtePlanSpec{"decode", {{.id = "XnnpackBackend", .index = 1}, {.index = 1}}}};
  spec.segments = {ManifestBytes("lib_so", "w", 32), ManifestBytes("lib_so", "w", decode_nbytes)};
  spec.named_data = std::move(named);
  const std::string path = dir.File("model.pte");
  ::ptd::testing::WriteFileBytes(path, BuildPte(spec));
  return path;
}

TEST(PteVerifyTest, TwoMethodsShareWeights) {
  TempDir dir;
  VerifyOptions o{.paths = {.ptd = WritePtd(dir, true), .pte = WritePte(dir, 32)}, .digest = true};
  const VerifyOutcome out = RunVerify(o);
  const nlohmann::ordered_json out_json = VerifyJson(out);
  ASSERT_EQ(out.exit_code(), 0) << out_json.dump(1);
  ASSERT_EQ(out_json["manifests"].size(), 2u);
  EXPECT_EQ(out_json["manifests"][0]["source"], "pte:forward:0");
  EXPECT_EQ(out_json["manifests"][1]["source"], "pte:decode:1");
  // The same view of the same storage digests the same through both.
  EXPECT_EQ(out_json["manifests"][0]["weights"][0]["sha256"],
            out_json["manifests"][1]["weights"][0]["sha256"]);
  EXPECT_TRUE(out.report.warnings().empty());  // Nothing orphaned.
}

TEST(PteVerifyTest, G4AcrossMethodsThatDisagree) {
  TempDir dir;
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, true), .pte = WritePte(dir, 40)}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 1);
  EXPECT_THAT(out.report, HasError("G4", ::testing::AllOf(MessageHas("40"), MessageHas("32"),
                                                          MessageHas("pte:forward:0"),
                                                          SourceIs("pte:decode:1"))));
}

TEST(PteVerifyTest, P3LibraryMissingFromPteAndPtd) {
  TempDir dir;
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, false), .pte = WritePte(dir, 32)}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 1);
  ASSERT_TRUE(out.report.HasError("P3"));
  EXPECT_THAT(out.report.errors()[0].message,
              HasSubstr("so_blob_key 'lib_so' is named data in neither"));
  EXPECT_EQ(out.report.errors()[0].key, "lib_so");
}

TEST(PteVerifyTest, P3SatisfiedByThePtesOwnNamedData) {
  TempDir dir;
  const VerifyOutcome out = RunVerify(VerifyOptions{
      .paths = {.ptd = WritePtd(dir, false), .pte = WritePte(dir, 32, {{"lib_so", 0}})}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 0) << out_json["errors"].dump(1);
  EXPECT_FALSE(out.report.HasError("P3"));
}

TEST(PteVerifyTest, LegacyPayloadIsWarningP4AndNoManifest) {
  TempDir dir;
  PteSpec spec;
  spec.plans = {PtePlanSpec{"forward", {{.index = 0}}}};
  spec.segments = {::ptd::testing::ToBytes("aoti_so\nweights_blob")};
  const std::string pte = dir.File("legacy.pte");
  ::ptd::testing::WriteFileBytes(pte, BuildPte(spec));
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, true), .pte = pte}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 0);
  EXPECT_TRUE(out.report.HasWarning("P4"));
  EXPECT_TRUE(out_json["manifests"].empty());
}

TEST(PteVerifyTest, UnsupportedManifestVersionIsM1Unimplemented) {
  TempDir dir;
  std::vector<uint8_t> manifest = ManifestBytes("lib_so", "w", 32);
  manifest[9] = '4';  // ETCUDAFQN4.
  PteSpec spec;
  spec.plans = {PtePlanSpec{"forward", {{.index = 0}}}};
  spec.segments = {manifest};
  const std::string pte = dir.File("v4.pte");
  ::ptd::testing::WriteFileBytes(pte, BuildPte(spec));
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, true), .pte = pte}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 1);
  EXPECT_THAT(
      out.report,
      HasError("M1", ::testing::AllOf(::ptd::testing::CodeIs(absl::StatusCode::kUnimplemented),
                                      SourceIs("pte:forward:0"))));
}

TEST(PteVerifyTest, ReleasedFqn3ManifestInDelegateIsVerified) {
  TempDir dir;
  PteSpec spec;
  spec.plans = {PtePlanSpec{"forward", {{.index = 0}}}};
  spec.segments = {ManifestBytes("lib_so", "w", 32, ManifestFormat::kFqn3)};
  const std::string pte = dir.File("fqn3.pte");
  ::ptd::testing::WriteFileBytes(pte, BuildPte(spec));
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, true), .pte = pte}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 0) << out_json["errors"].dump(1);
  ASSERT_EQ(out_json["manifests"].size(), 1u);
  EXPECT_EQ(out_json["manifests"][0]["format"], "ETCUDAFQN3");
  EXPECT_EQ(out_json["manifests"][0]["variants"][0]["so_blob_key"], "lib_so");
}

TEST(PteVerifyTest, ReleasedFqn3ManifestInDelegateGetsGeometryRules) {
  TempDir dir;
  PteSpec spec;
  spec.plans = {PtePlanSpec{"forward", {{.index = 0}}}};
  // 64 bytes claimed for a 32-byte segment: G3.
  spec.segments = {ManifestBytes("lib_so", "w", 64, ManifestFormat::kFqn3)};
  const std::string pte = dir.File("fqn3.pte");
  ::ptd::testing::WriteFileBytes(pte, BuildPte(spec));
  const VerifyOutcome out =
      RunVerify(VerifyOptions{.paths = {.ptd = WritePtd(dir, true), .pte = pte}});
  const nlohmann::ordered_json out_json = VerifyJson(out);
  EXPECT_EQ(out.exit_code(), 1);
  EXPECT_TRUE(out.report.HasError("G3")) << out_json["errors"].dump(1);
}

}  // namespace
}  // namespace ptd
