// The ptd-extract and ptd-reweight command lines, and ptd-verify --stats
// (docs/SPEC.md section 7): exit codes, the files they write (or leave
// alone), their JSON objects and what they say.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "ptd/safetensors.h"
#include "ptd/weight_writer.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ConformancePath;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::RunCommand;
using ::ptd::testing::TempDir;
using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kK01 = ConformancePath("files/k01_view_geometry.ptd");
const std::string kK01Manifest = ConformancePath("files/k01_view_geometry.manifest");

std::string Extract(const std::string& args) {
  return std::string(PTD_EXTRACT_BINARY) + " " + args;
}
std::string Reweight(const std::string& args) {
  return std::string(PTD_REWEIGHT_BINARY) + " " + args;
}

// A model of one f32 [2, 3] weight "w" holding `values`.
void WriteModel(const TempDir& dir, const std::vector<float>& values) {
  std::vector<uint8_t> storage(values.size() * sizeof(float));
  std::memcpy(storage.data(), values.data(), storage.size());
  CudaWeightWriter w("lib_so");
  ASSERT_TRUE(w.Add(WeightSpec{.fqn = "w",
                               .dtype = 6,
                               .device_type = 1,
                               .value = {.storage = storage,
                                         .sizes = {2, 3},
                                         .strides = {3, 1},
                                         .is_original_storage = true},
                               .properties = {.shape = {2, 3}, .stride = {3, 1}}})
                  .ok());
  ASSERT_TRUE(w.Write(dir.File("m.ptd"), dir.File("m.manifest")).ok());
}

TEST(CheckpointCliTest, HelpAndVersionExitZero) {
  for (const auto& [command, flag] :
       {std::pair{Extract("--help"), "--max-shard-size"}, {Reweight("--help"), "--base"}}) {
    auto r = RunCommand(command + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(RunCommand(Extract("--version")).out, HasSubstr("ptd-extract"));
  EXPECT_THAT(RunCommand(Reweight("--version")).out, HasSubstr("ptd-reweight"));
}

TEST(CheckpointCliTest, UsageErrorsExitTwo) {
  TempDir dir;
  EXPECT_EQ(RunCommand(Extract(kK01 + " 2>&1")).exit_code, 2);  // No --out.
  auto r = RunCommand(Reweight("x.safetensors -o " + dir.File("o.ptd") + " 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--manifest or --pte"));
  EXPECT_EQ(RunCommand(Reweight("x.safetensors --manifest m --rename nope -o o 2>&1")).exit_code,
            2);
  EXPECT_EQ(RunCommand(Extract(kK01 + " -o x --max-shard-size 0 2>&1")).exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir.File("o.ptd")));
}

TEST(CheckpointCliTest, ExtractThenReweightWithBaseGivesTheFileBack) {
  TempDir dir;
  const std::string st = dir.File("k01.safetensors");
  auto x = RunCommand(Extract(kK01 + " --manifest " + kK01Manifest + " -o " + st + " --json"));
  ASSERT_EQ(x.exit_code, 0) << x.out;
  const json j = json::parse(x.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_FALSE(j["tensors"].empty());
  EXPECT_EQ(j["files"], json::array({st}));
  // What was written is a safetensors file with those tensors.
  auto source = OpenPreadFile(st);
  ASSERT_TRUE(source.ok()) << source.status();
  auto file = SafetensorsFile::Open(std::shared_ptr<const FileSource>(std::move(*source)));
  ASSERT_TRUE(file.ok()) << file.status();
  for (const auto& t : j["tensors"]) {
    EXPECT_NE(file->Find(t["name"].get<std::string>()), nullptr) << t["name"];
  }

  const std::string out = dir.File("k01.ptd");
  auto r = RunCommand(
      Reweight(st + " --manifest " + kK01Manifest + " --base " + kK01 + " -o " + out + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("wrote " + out));
  EXPECT_EQ(ReadFileBytes(out), ReadFileBytes(kK01));
}

TEST(CheckpointCliTest, ShardsGoToAFolderWithAnIndex) {
  TempDir dir;
  const std::string folder = dir.File("shards");
  auto x = RunCommand(Extract(kK01 + " --manifest " + kK01Manifest + " -o " + folder +
                              " --max-shard-size 1 --json"));
  ASSERT_EQ(x.exit_code, 0) << x.out;
  const json j = json::parse(x.out);
  ASSERT_GE(j["files"].size(), 2u);
  const std::string index = folder + "/" + std::string(kShardIndexFileName);
  EXPECT_EQ(j["files"].back(), index);
  auto checkpoint = SafetensorsCheckpoint::Open(index);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->tensors().size(), j["tensors"].size());
  // The index reweights like one file.
  auto r = RunCommand(Reweight(index + " --manifest " + kK01Manifest + " --base " + kK01 + " -o " +
                               dir.File("back.ptd") + " 2>&1"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ReadFileBytes(dir.File("back.ptd")), ReadFileBytes(kK01));
}

TEST(CheckpointCliTest, BrokenRuleExitsOneAndWritesNothing) {
  TempDir dir;
  WriteModel(dir, {1, 2, 3, 4, 5, 6});
  // A checkpoint whose "w" is [3, 2]: S8.
  auto layout = PlanSafetensors(
      {SafetensorsTensorSpec{.name = "w", .dtype = FindSafetensorsDtype("F32"), .shape = {3, 2}}},
      {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(WriteSafetensors(dir.File("c.safetensors"), *layout,
                               [](const SafetensorsTensor& t, const WriteFn& write) {
                                 std::vector<uint8_t> zeros(t.nbytes());
                                 return write(zeros);
                               })
                  .ok());
  const std::string out = dir.File("out.ptd");
  auto r = RunCommand(Reweight(dir.File("c.safetensors") + " --manifest " + dir.File("m.manifest") +
                               " -o " + out + " 2>&1"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("(S8)"));
  EXPECT_THAT(r.out, HasSubstr("weight 'w'"));
  EXPECT_FALSE(std::filesystem::exists(out));
  // --json says the same as one object.
  auto js = RunCommand(Reweight(dir.File("c.safetensors") + " --manifest " +
                                dir.File("m.manifest") + " -o " + out + " --json 2>/dev/null"));
  EXPECT_EQ(js.exit_code, 1);
  const json j = json::parse(js.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  // The shape of every tool's failure.
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["rule"], "S8");
  EXPECT_TRUE(j["warnings"].empty());
  EXPECT_FALSE(j.contains("error"));
  // An input that cannot be read is exit 2.
  auto missing =
      RunCommand(Extract(dir.File("none.ptd") + " -o " + dir.File("x.safetensors") + " 2>&1"));
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.safetensors")));
}

TEST(CheckpointCliTest, JsonOfPathsThatAreNotUtf8HasReplacementsNotACrash) {
  // Names read from the files are valid UTF-8 (C6, M5, S3), but a path is any
  // bytes: --json replaces a bad byte with U+FFFD, as ptd-verify does.
  TempDir dir;
  const std::string kReplacement = "\xef\xbf\xbd";
  const std::string st = dir.File("k01\xff.safetensors");
  auto x = RunCommand(Extract(kK01 + " --manifest " + kK01Manifest + " -o '" + st + "' --json"));
  ASSERT_EQ(x.exit_code, 0) << x.out;
  EXPECT_EQ(json::parse(x.out)["files"],
            json::array({dir.File("k01" + kReplacement + ".safetensors")}));
  const std::string out = dir.File("k01\xff.ptd");
  auto r = RunCommand(Reweight("'" + st + "' --manifest " + kK01Manifest + " --base " + kK01 +
                               " -o '" + out + "' --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["out"], dir.File("k01" + kReplacement + ".ptd"));
  EXPECT_EQ(ReadFileBytes(out), ReadFileBytes(kK01));
  // A failure that names such a path: one JSON object too.
  auto missing =
      RunCommand(Extract("'" + dir.File("none\xff.ptd") + "' -o '" + st + "' --json 2>/dev/null"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(json::parse(missing.out)["errors"][0]["message"].get<std::string>(),
              HasSubstr("none" + kReplacement + ".ptd"));
}

TEST(CheckpointCliTest, StatsCountNanAndInfAndWarnN1) {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  WriteModel(dir, {1.5f, nan, -2.0f, inf, nan, 0.25f});
  auto v = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --stats --manifest " +
                      dir.File("m.manifest") + " " + dir.File("m.ptd"));
  ASSERT_EQ(v.exit_code, 0) << v.out;  // N1 is a warning.
  const json j = json::parse(v.out);
  const json& stats = j["manifests"][0]["weights"][0]["stats"];
  EXPECT_EQ(stats["nan"], 2);
  EXPECT_EQ(stats["inf"], 1);
  EXPECT_DOUBLE_EQ(stats["min"].get<double>(), -2.0);
  EXPECT_DOUBLE_EQ(stats["max"].get<double>(), 1.5);
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"];
  EXPECT_EQ(j["warnings"][0]["rule"], "N1");
  EXPECT_EQ(j["warnings"][0]["fqn"], "w");
  // Without --stats there is no "stats" member and no N1.
  auto plain = RunCommand(std::string(PTD_VERIFY_BINARY) + " --json --manifest " +
                          dir.File("m.manifest") + " " + dir.File("m.ptd"));
  const json p = json::parse(plain.out);
  EXPECT_FALSE(p["manifests"][0]["weights"][0].contains("stats"));
  EXPECT_TRUE(p["warnings"].empty());
  // The readable report gives the counts; extract --stats the same.
  auto text = RunCommand(std::string(PTD_VERIFY_BINARY) + " --stats --manifest " +
                         dir.File("m.manifest") + " " + dir.File("m.ptd"));
  EXPECT_THAT(text.out, HasSubstr("NaN 2, Inf 1, min -2, max 1.5"));
  auto x = RunCommand(Extract(dir.File("m.ptd") + " --manifest " + dir.File("m.manifest") +
                              " --stats -o " + dir.File("m.safetensors") + " --json"));
  ASSERT_EQ(x.exit_code, 0) << x.out;
  const json xj = json::parse(x.out);
  EXPECT_EQ(xj["tensors"][0]["stats"]["nan"], 2);
  ASSERT_EQ(xj["warnings"].size(), 1u);
  EXPECT_EQ(xj["warnings"][0]["rule"], "N1");
}

}  // namespace
}  // namespace ptd
