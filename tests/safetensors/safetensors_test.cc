// The safetensors reader and writer (ptd/safetensors.h; docs/SPEC.md
// section 7, S1-S7): round trips, the reference writer's bytes, and one
// hostile file per rule, each asserting the rule ID and its numbers.
#include "ptd/safetensors.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/file_source.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::TempDir;
using ::ptd::testing::WriteFileBytes;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr char kName[] = "t.safetensors";

std::vector<uint8_t> Le64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

// A file: 8-byte length, `header` as is, then `data_bytes` bytes 0, 1, 2...
std::vector<uint8_t> File(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = static_cast<uint8_t>(i);
  return b;
}

absl::StatusOr<SafetensorsFile> OpenBytes(std::vector<uint8_t> bytes) {
  return SafetensorsFile::Open(MemorySource(std::move(bytes), kName));
}

const SafetensorsDtype* D(const char* name) {
  const SafetensorsDtype* d = FindSafetensorsDtype(name);
  EXPECT_NE(d, nullptr) << name;
  return d;
}

// Writes `specs` with each tensor's bytes i + (first byte of its name).
absl::Status WriteTensors(const std::string& path, std::vector<SafetensorsTensorSpec> specs,
                          const std::vector<std::pair<std::string, std::string>>& meta = {}) {
  auto layout = PlanSafetensors(std::move(specs), meta);
  if (!layout.ok()) return layout.status();
  return WriteSafetensors(path, *layout, [](const SafetensorsTensor& t, const WriteFn& write) {
    std::vector<uint8_t> bytes(t.nbytes());
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<uint8_t>(i + static_cast<uint8_t>(t.name[0]));
    }
    return write(bytes);
  });
}

// ---- dtypes ----

TEST(SafetensorsDtypeTest, ClosedSetAndScalarTypes) {
  const std::vector<std::pair<const char*, int32_t>> mapped = {
      {"U8", 0},       {"I8", 1},       {"I16", 2},  {"I32", 3},   {"I64", 4},
      {"F16", 5},      {"F32", 6},      {"F64", 7},  {"BOOL", 11}, {"BF16", 15},
      {"F8_E5M2", 23}, {"F8_E4M3", 24}, {"U16", 27}, {"U32", 28},  {"U64", 29}};
  for (const auto& [name, st] : mapped) {
    ASSERT_NE(FindSafetensorsDtype(name), nullptr) << name;
    EXPECT_EQ(FindSafetensorsDtype(name)->scalar_type, st) << name;
    ASSERT_NE(SafetensorsDtypeFor(st), nullptr) << st;
    EXPECT_EQ(SafetensorsDtypeFor(st)->name, name);
  }
  for (const char* name : {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "C64"}) {
    ASSERT_NE(FindSafetensorsDtype(name), nullptr) << name;
    EXPECT_EQ(FindSafetensorsDtype(name)->scalar_type, -1) << name;
  }
  EXPECT_EQ(FindSafetensorsDtype("F4")->bits, 4u);
  EXPECT_EQ(FindSafetensorsDtype("F6_E3M2")->bits, 6u);
  EXPECT_EQ(FindSafetensorsDtype("C64")->bits, 64u);
  EXPECT_EQ(FindSafetensorsDtype("f32"), nullptr);
  EXPECT_EQ(FindSafetensorsDtype("F128"), nullptr);
  EXPECT_EQ(SafetensorsDtypeFor(-1), nullptr);
  EXPECT_EQ(SafetensorsDtypeFor(8), nullptr);   // ComplexHalf.
  EXPECT_EQ(SafetensorsDtypeFor(44), nullptr);  // Float8_e8m0fnu has no name here.
}

// ---- the writer ----

TEST(SafetensorsWriterTest, MatchesTheReferenceWritersBytes) {
  // tensor.rs' test_serialization: "attn.0", F32 [1,2,3], values 0..5.
  auto layout = PlanSafetensors({{"attn.0", D("F32"), {1, 2, 3}}}, {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  std::vector<uint8_t> want = Le64(64);
  want.insert(want.end(), json.begin(), json.end());
  ASSERT_EQ(json.size(), 64u);
  EXPECT_EQ(layout->header, want);
  EXPECT_EQ(layout->file_size(), 72u + 24u);

  // test_serialization_forced_alignement: "attn0", [1,1,2,3], padded by 7.
  layout = PlanSafetensors({{"attn0", D("F32"), {1, 1, 2, 3}}}, {});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->header.size(), 8u + 72u);
  EXPECT_EQ(layout->header[0], 72);
  EXPECT_EQ(std::string(layout->header.end() - 7, layout->header.end()), "       ");

  // test_empty: "{}" and six spaces; with {"framework": "pt"}, 40 bytes.
  layout = PlanSafetensors({}, {});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->header,
            (std::vector<uint8_t>{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}));
  layout = PlanSafetensors({}, {{"framework", "pt"}});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(std::string(layout->header.begin() + 8, layout->header.end()),
            R"({"__metadata__":{"framework":"pt"}})"
            "     ");
}

TEST(SafetensorsWriterTest, OrdersByDtypeAlignmentThenName) {
  auto layout = PlanSafetensors({{"z", D("U8"), {3}},
                                 {"b", D("F32"), {2}},
                                 {"a", D("F32"), {1}},
                                 {"m", D("BF16"), {2}},
                                 {"c", D("F64"), {1}},
                                 {"q", D("C64"), {1}},
                                 {"e", D("I64"), {0}}},
                                {{"k2", "v"}, {"k1", "w"}});
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<std::string> order;
  for (const SafetensorsTensor& t : layout->tensors) order.push_back(t.name);
  // tensor.rs' Dtype order: ... BF16 < I32 < U32 < F32 < C64 < F64 < I64.
  EXPECT_EQ(order, (std::vector<std::string>{"e", "c", "q", "a", "b", "m", "z"}));
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : layout->tensors) {
    EXPECT_EQ(t.begin, offset) << t.name;
    offset = t.end;
  }
  EXPECT_EQ(offset, 35u);
  const std::string text(layout->header.begin() + 8, layout->header.end());
  EXPECT_EQ(text.size() % 8, 0u);
  EXPECT_EQ(text.find_first_not_of(' ', text.rfind('}') + 1), std::string::npos);
  // __metadata__ first, in the caller's order; then the tensors in data order.
  EXPECT_EQ(text.rfind(R"({"__metadata__":{"k2":"v","k1":"w"},"e":{"dtype":"I64")", 0), 0u) << text;
  EXPECT_LT(text.find("\"c\":"), text.find("\"q\":"));
  EXPECT_LT(text.find("\"b\":"), text.find("\"m\":"));
  EXPECT_THAT(text, HasSubstr(R"("z":{"dtype":"U8","shape":[3],"data_offsets":[32,35]})"));
}

TEST(SafetensorsWriterTest, NonAsciiNamesAreRawUtf8) {
  auto layout = PlanSafetensors({{"gewicht.\xc3\xa4", D("U8"), {1}}}, {{"k", "\xe2\x82\xac"}});
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::string text(layout->header.begin() + 8, layout->header.end());
  EXPECT_THAT(text, HasSubstr("\"gewicht.\xc3\xa4\":"));
  EXPECT_THAT(text, HasSubstr("\"k\":\"\xe2\x82\xac\""));
}

TEST(SafetensorsWriterTest, RefusesBadSpecs) {
  EXPECT_EQ(PlanSafetensors({{"", D("U8"), {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"a", nullptr, {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"a", D("U8"), {1}}, {"a", D("F32"), {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"__metadata__", D("U8"), {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"\xff", D("U8"), {1}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"a", D("F64"), {uint64_t{1} << 62}}}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"a", D("F4"), {3}}}, {}).status().code(),  // 12 bits.
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSafetensors({{"a", D("U8"), {1}}}, {{"k", "1"}, {"k", "2"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsWriterTest, AFillOfTheWrongCountLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.File("out.safetensors");
  auto layout = PlanSafetensors({{"a", D("F32"), {4}}, {"b", D("U8"), {2}}}, {});
  ASSERT_TRUE(layout.ok());
  for (size_t n : {0, 15, 17}) {
    absl::Status s =
        WriteSafetensors(path, *layout, [n](const SafetensorsTensor& t, const WriteFn& write) {
          std::vector<uint8_t> b(t.name == "a" ? n : t.nbytes());
          return write(b);
        });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n << ": " << s;
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr("\"a\""), HasSubstr(std::to_string(n)), HasSubstr("16")));
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::is_empty(dir.path())) << "a temporary was left behind";
  }
  // A fill's own error is returned as is.
  absl::Status s = WriteSafetensors(path, *layout, [](const SafetensorsTensor&, const WriteFn&) {
    return absl::UnavailableError("device gone");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SafetensorsWriterTest, ShardFileNames) {
  EXPECT_EQ(ShardFileName(1, 4), "model-00001-of-00004.safetensors");
  EXPECT_EQ(ShardFileName(12, 123), "model-00012-of-00123.safetensors");
}

// ---- the reader ----

TEST(SafetensorsFileTest, RoundTrip) {
  TempDir dir;
  const std::string path = dir.File("m.safetensors");
  ASSERT_TRUE(WriteTensors(path,
                           {{"w", D("F32"), {2, 3}},
                            {"b", D("BF16"), {3}},
                            {"flag", D("BOOL"), {5}},
                            {"empty", D("F16"), {0, 4}},
                            {"s", D("I64"), {}}},
                           {{"format", "pt"}, {"a", "b"}})
                  .ok());
  for (bool mmap : {false, true}) {
    auto source = OpenFile(path, mmap);
    ASSERT_TRUE(source.ok()) << source.status();
    auto file = SafetensorsFile::Open(*source);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->path(), path);
    EXPECT_EQ(file->metadata(),
              (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}, {"a", "b"}}));
    ASSERT_EQ(file->tensors().size(), 5u);
    EXPECT_EQ(file->data_offset() % 8, 0u);
    uint64_t end = 0;
    for (const SafetensorsTensor& t : file->tensors()) {
      EXPECT_EQ(t.begin, end);
      end = t.end;
    }
    EXPECT_EQ(file->data_offset() + end, fs::file_size(path));
    const SafetensorsTensor* w = file->Find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dtype, D("F32"));
    EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(w->nbytes(), 24u);
    std::vector<uint8_t> bytes(20);
    ASSERT_TRUE(file->Read(*w, 4, absl::MakeSpan(bytes)).ok());
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], 'w' + 4 + i);
    EXPECT_EQ(file->Read(*w, 5, absl::MakeSpan(bytes)).code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(file->Find("empty")->nbytes(), 0u);
    EXPECT_TRUE(file->Read(*file->Find("empty"), 0, {}).ok());
    EXPECT_EQ(file->Find("s")->nbytes(), 8u);
    EXPECT_EQ(file->Find("absent"), nullptr);
  }
  auto ckpt = SafetensorsCheckpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->paths(), std::vector<std::string>{path});
  EXPECT_EQ(ckpt->tensors().size(), 5u);
  ASSERT_TRUE(ckpt->Find("b").has_value());
  EXPECT_EQ(ckpt->Find("b")->tensor->dtype, D("BF16"));
  EXPECT_FALSE(ckpt->Find("nope").has_value());
}

TEST(SafetensorsFileTest, AcceptsEdgeCases) {
  // No tensors, no data.
  EXPECT_TRUE(OpenBytes(File("{}", 0)).ok());
  EXPECT_TRUE(OpenBytes(File("{}      ", 0)).ok());
  EXPECT_TRUE(OpenBytes(File(R"({"__metadata__":{}})", 0)).ok());
  // Zero-size tensors anywhere, unordered members, unknown fields ignored.
  auto f = OpenBytes(File(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1},)"
                          R"("z":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                          R"("a":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]},)"
                          R"("f4":{"dtype":"F4","shape":[2,3],"data_offsets":[2,5]}})",
                          5));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->Find("f4")->nbytes(), 3u);
}

struct Hostile {
  const char* name;
  std::vector<uint8_t> bytes;
  const char* rule;
  std::vector<std::string> substrings;  // The numbers and names the message gives.
};

std::vector<uint8_t> WithLength(uint64_t n, size_t total) {
  std::vector<uint8_t> b = Le64(n);
  b.resize(total, '{');
  return b;
}

std::vector<Hostile> HostileFiles() {
  const std::string t = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  return {
      {"shorter_than_8", {1, 0, 0}, "S1", {"3 bytes"}},
      {"empty", {}, "S1", {"0 bytes"}},
      {"header_past_end", WithLength(100, 58), "S1", {"100", "108", "58"}},
      {"header_length_2_63",
       WithLength(uint64_t{1} << 63, 16),
       "S2",
       {"9223372036854775808", "100000000"}},
      {"header_length_max", WithLength(~uint64_t{0}, 16), "S2", {"18446744073709551615"}},
      {"header_length_1e8_plus_1", WithLength(100'000'001, 64), "S2", {"100000001"}},
      {"bad_utf8", File("{\"\xff\":1}", 0), "S3", {"UTF-8"}},
      {"overlong_utf8", File("{\"\xc0\xaf\":1}", 0), "S3", {"UTF-8"}},
      {"not_json", File("{\"w\":", 0), "S3", {"JSON"}},
      {"trailing_json", File("{} {}", 0), "S3", {"JSON"}},
      {"array", File("[]", 0), "S3", {"array"}},
      {"duplicate_tensor", File("{" + t + "," + t + "}", 16), "S3", {"\"w\"", "twice"}},
      {"duplicate_field",
       File(R"({"w":{"dtype":"F32","dtype":"U8","shape":[],"data_offsets":[0,4]}})", 4),
       "S3",
       {"\"dtype\"", "twice"}},
      {"metadata_not_string", File(R"({"__metadata__":{"a":1}})", 0), "S3", {"\"a\"", "number"}},
      {"metadata_not_object", File(R"({"__metadata__":"x"})", 0), "S3", {"string"}},
      {"tensor_not_object", File(R"({"w":[1]})", 0), "S4", {"\"w\"", "array"}},
      {"unknown_dtype",
       File(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
       "S4",
       {"\"w\"", "F128"}},
      {"lowercase_dtype",
       File(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4),
       "S4",
       {"f32"}},
      {"no_shape",
       File(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
       "S4",
       {"\"w\"", "shape"}},
      {"no_offsets", File(R"({"w":{"dtype":"F32","shape":[1]}})", 4), "S4", {"data_offsets"}},
      {"negative_dim",
       File(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "S4",
       {"shape[0]", "-1"}},
      {"float_dim",
       File(R"({"w":{"dtype":"F32","shape":[1,2.5],"data_offsets":[0,4]}})", 4),
       "S4",
       {"shape[1]", "2.5"}},
      {"three_offsets",
       File(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4),
       "S4",
       {"[0,4,8]"}},
      {"shape_overflow",
       File(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,16]}})", 16),
       "S5",
       {"\"w\"", "[4294967296,4294967296,2]", "overflows", "16"}},
      {"bits_overflow",
       File(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8),
       "S5",
       {"overflows"}},
      {"size_differs",
       File(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
       "S5",
       {"\"w\"", "[2,3]", "F32", "24 bytes", "span 20"}},
      {"partial_byte",
       File(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2),
       "S5",
       {"whole number of bytes"}},
      {"end_before_begin",
       File(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8),
       "S6",
       {"[8, 4]"}},
      {"first_not_at_0",
       File(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
       "S6",
       {"\"w\"", "begin at 4", "0"}},
      {"overlap",
       File(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
            8),
       "S6",
       {"\"b\"", "begin at 4", "\"a\" ends at 8", "overlap"}},
      {"gap",
       File(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
            10),
       "S6",
       {"\"b\"", "begin at 6", "ends at 4", "gap"}},
      {"truncated_data", File("{" + t + "}", 12), "S6", {"16", "12"}},
      {"trailing_data", File("{" + t + "}", 20), "S6", {"16", "20"}},
      {"data_without_tensors", File("{}", 1), "S6", {"0", "1 bytes"}},
  };
}

TEST(SafetensorsFileTest, RejectsHostileFilesWithTheirRule) {
  for (const Hostile& h : HostileFiles()) {
    SCOPED_TRACE(h.name);
    auto f = OpenBytes(h.bytes);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
    const std::string m(f.status().message());
    EXPECT_THAT(m, HasSubstr(kName));
    EXPECT_THAT(m, ::testing::EndsWith("(" + std::string(h.rule) + ")"));
    for (const std::string& s : h.substrings) EXPECT_THAT(m, HasSubstr(s));
  }
}

TEST(SafetensorsFileTest, ReadsNoMoreThanTheHeader) {
  // A source that says it is huge but holds a short header: Open reads the
  // length and the header, nothing of the data buffer.
  class Counting final : public FileSource {
   public:
    explicit Counting(std::vector<uint8_t> b) : bytes_(std::move(b)), name_("huge") {}
    const std::string& name() const override { return name_; }
    uint64_t size() const override { return uint64_t{1} << 50; }
    absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> dst) const override {
      read_ += dst.size();
      if (offset + dst.size() > bytes_.size()) return absl::OutOfRangeError("past");
      std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
      return absl::OkStatus();
    }
    mutable uint64_t read_ = 0;

   private:
    std::vector<uint8_t> bytes_;
    std::string name_;
  };
  // 16-digit sizes either way: the header's length does not change.
  const auto header = [](uint64_t n) {
    return R"({"w":{"dtype":"U8","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
           std::to_string(n) + "]}}";
  };
  const std::string h = header((uint64_t{1} << 50) - 8 - header(1'000'000'000'000'000).size());
  auto source = std::make_shared<Counting>(File(h, 0));
  auto f = SafetensorsFile::Open(source);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(source->read_, 8 + h.size());
}

// ---- sharded checkpoints (S7) ----

class SafetensorsIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        WriteTensors(dir_.File(ShardFileName(1, 2)), {{"a", D("F32"), {2}}, {"b", D("U8"), {3}}})
            .ok());
    ASSERT_TRUE(WriteTensors(dir_.File(ShardFileName(2, 2)), {{"c", D("I64"), {1}}}).ok());
  }
  std::string Index(const std::string& json) {
    const std::string path = dir_.File(kShardIndexFileName.data());
    WriteFileBytes(path, std::vector<uint8_t>(json.begin(), json.end()));
    return path;
  }
  void ExpectS7(const std::string& json, const std::vector<std::string>& substrings) {
    SCOPED_TRACE(json);
    auto c = SafetensorsCheckpoint::Open(Index(json));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
    const std::string m(c.status().message());
    EXPECT_THAT(m, AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("(S7)")));
    for (const std::string& s : substrings) EXPECT_THAT(m, HasSubstr(s));
  }
  TempDir dir_;
};

TEST_F(SafetensorsIndexTest, OpensEveryShard) {
  auto c = SafetensorsCheckpoint::Open(
      Index(R"({"metadata":{"total_size":24},"weight_map":{"c":"model-00002-of-00002.safetensors",)"
            R"("a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->paths().size(), 3u);
  EXPECT_EQ(c->paths()[1], dir_.File(ShardFileName(2, 2)));  // In the index's order.
  std::vector<std::string> names;
  for (const auto& ref : c->tensors()) names.push_back(ref.tensor->name);
  EXPECT_EQ(names, (std::vector<std::string>{"c", "a", "b"}));
  ASSERT_TRUE(c->Find("b").has_value());
  std::vector<uint8_t> bytes(3);
  ASSERT_TRUE(c->Find("b")->file->Read(*c->Find("b")->tensor, 0, absl::MakeSpan(bytes)).ok());
  EXPECT_EQ(bytes, (std::vector<uint8_t>{'b', 'b' + 1, 'b' + 2}));
  // Moving keeps the references.
  SafetensorsCheckpoint moved = *std::move(c);
  EXPECT_EQ(moved.Find("c")->tensor->name, "c");
}

TEST_F(SafetensorsIndexTest, RejectsBrokenIndexes) {
  ExpectS7(R"({"weight_map":{"a":"absent.safetensors"}})", {"absent.safetensors"});
  ExpectS7(R"({"weight_map":{"c":"model-00001-of-00002.safetensors"}})",
           {"\"c\"", "model-00001-of-00002.safetensors", "does not hold"});
  ExpectS7(R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})", {"\"a\"", "separator"});
  ExpectS7(R"({"weight_map":{"a":"sub/x.safetensors"}})", {"sub/x.safetensors"});
  ExpectS7(R"({"weight_map":{"a":".."}})", {"\"..\""});
  ExpectS7(R"({"weight_map":{"a":1}})", {"\"a\"", "number"});
  ExpectS7(R"({"weight_map":["a"]})", {"weight_map"});
  ExpectS7(R"({"metadata":{}})", {"weight_map"});
  ExpectS7(R"([])", {"array"});
  ExpectS7(R"({"weight_map":)", {"JSON"});
  ExpectS7(R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
           R"("a":"model-00001-of-00002.safetensors"}})",
           {"\"a\"", "twice"});
}

TEST_F(SafetensorsIndexTest, AShardsOwnRuleIsReported) {
  WriteFileBytes(dir_.File("bad.safetensors"), {1, 2, 3});
  auto c = SafetensorsCheckpoint::Open(Index(R"({"weight_map":{"a":"bad.safetensors"}})"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr("bad.safetensors"), HasSubstr("(S1)")));
}

TEST(SafetensorsCheckpointTest, MissingFileIsNotFound) {
  TempDir dir;
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir.File("x.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SafetensorsCheckpoint::Open(dir.File("x.safetensors.index.json")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ptd
