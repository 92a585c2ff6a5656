// Tests of the ETCUDAFQN0/ETCUDAFQN3 manifest decoder, encoder and variant choice
// (docs/SPEC.md section 2, rules M1-M6). Corrupt manifests are built byte by
// byte with ManifestBytes; each test asserts the specific rule it breaks.
#include "ptd/manifest.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/scalar_type.h"
#include "runtime/internal/bytes_le.h"
#include "tests/testing/diagnostics.h"

namespace ptd {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// One manifest entry's fields, as they go on the wire. `ndim` defaults to
// sizes.size(); set it to write a count that disagrees with the vectors.
struct EntryFields {
  std::string fqn = "layers.0.w";
  std::string key = "cuda_fqn_weight:cuda:layers.0.w";
  uint64_t nbytes = 48;
  int32_t dtype = 6;
  int32_t device_type = 1;
  int64_t offset = 0;
  std::vector<int64_t> sizes = {3, 4};
  std::vector<int64_t> strides = {4, 1};
  std::optional<uint32_t> ndim;
};

// Builds manifest bytes field by field (little-endian).
class ManifestBytes {
 public:
  ManifestBytes& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ManifestBytes& Magic() { return Raw(kManifestMagicFqn0); }
  template <typename T>
  ManifestBytes& Int(T v) {
    uint8_t b[sizeof(T)];
    internal::StoreLE(b, v);
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
    return *this;
  }
  ManifestBytes& U32(uint32_t v) { return Int(v); }
  ManifestBytes& Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    return Raw(s);
  }
  ManifestBytes& Variant(uint32_t target_sm, uint32_t ptx, uint32_t flags, std::string_view key) {
    return U32(target_sm).U32(ptx).U32(flags).Str(key);
  }
  ManifestBytes& Entry(const EntryFields& e) {
    Str(e.fqn).Str(e.key).Int<uint64_t>(e.nbytes).Int<int32_t>(e.dtype);
    Int<int32_t>(e.device_type).Int<int64_t>(e.offset);
    U32(e.ndim.value_or(static_cast<uint32_t>(e.sizes.size())));
    for (int64_t s : e.sizes) Int<int64_t>(s);
    for (int64_t s : e.strides) Int<int64_t>(s);
    return *this;
  }
  // Magic and one untargeted variant: the usual head of a manifest.
  static ManifestBytes Untargeted() {
    ManifestBytes b;
    b.Magic().U32(1).Variant(0, 0, 0, "so_blob");
    return b;
  }
  // A complete manifest with the given entries after Untargeted().
  static std::vector<uint8_t> WithEntries(const std::vector<EntryFields>& es) {
    ManifestBytes b = Untargeted();
    b.U32(static_cast<uint32_t>(es.size()));
    for (const EntryFields& e : es) b.Entry(e);
    return b.bytes();
  }
  // Magic, the given variants and no entries.
  static std::vector<uint8_t> WithVariants(const std::vector<::ptd::Variant>& vs) {
    ManifestBytes b;
    b.Magic().U32(static_cast<uint32_t>(vs.size()));
    for (const auto& v : vs) b.Variant(v.target_sm, v.ptx_compute, v.flags, v.so_blob_key);
    b.U32(0);
    return b.bytes();
  }

  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

struct Decoded {
  Report report;
  std::optional<Manifest> manifest;
};

Decoded Decode(const std::vector<uint8_t>& bytes) {
  Decoded d;
  d.manifest = DecodeManifest(bytes, Where{.file = "test.manifest"}, &d.report);
  return d;
}

// The distinct rules of the report's errors, sorted.
std::vector<std::string> Rules(const Report& r) {
  std::set<std::string> rules;
  for (const Diagnostic& d : r.errors()) rules.insert(d.rule);
  return {rules.begin(), rules.end()};
}

// Every error and warning, one per line (for failure output and substring
// checks).
std::string Messages(const Report& r) { return ::ptd::testing::Describe(r); }

std::vector<uint8_t> ReadConformance(const std::string& name) {
  std::ifstream in(std::string(PTD_TEST_DATA_DIR) + "/conformance/files/" + name, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

Variant V(uint32_t target, uint32_t ptx, uint32_t flags, std::string key) {
  return Variant{
      .target_sm = target, .ptx_compute = ptx, .flags = flags, .so_blob_key = std::move(key)};
}

// --- A well-formed manifest ---------------------------------------------------

TEST(ManifestTest, DecodesWellFormedManifest) {
  EntryFields e;
  e.offset = 2;
  const Decoded d = Decode(ManifestBytes::WithEntries({e}));
  ASSERT_TRUE(d.report.ok()) << Messages(d.report);
  ASSERT_TRUE(d.manifest.has_value());
  ASSERT_EQ(d.manifest->variants.size(), 1u);
  EXPECT_EQ(d.manifest->variants[0].so_blob_key, "so_blob");
  ASSERT_EQ(d.manifest->entries.size(), 1u);
  const WeightEntry& w = d.manifest->entries[0];
  EXPECT_EQ(w.fqn, "layers.0.w");
  EXPECT_EQ(w.storage_key, "cuda_fqn_weight:cuda:layers.0.w");
  EXPECT_EQ(w.storage_nbytes, 48u);
  EXPECT_EQ(w.dtype, 6);
  EXPECT_EQ(w.device_type, 1);
  EXPECT_EQ(w.storage_offset, 2);
  EXPECT_THAT(w.sizes, ElementsAre(3, 4));
  EXPECT_THAT(w.strides, ElementsAre(4, 1));
  EXPECT_TRUE(w.well_formed);
}

TEST(ManifestTest, DecodesZeroDimEntryAndNoEntries) {
  EntryFields e;
  e.sizes = {};
  e.strides = {};
  const Decoded d = Decode(ManifestBytes::WithEntries({e}));
  ASSERT_TRUE(d.report.ok()) << Messages(d.report);
  EXPECT_THAT(d.manifest->entries[0].sizes, IsEmpty());

  const Decoded none = Decode(ManifestBytes::WithEntries({}));
  ASSERT_TRUE(none.report.ok()) << Messages(none.report);
  EXPECT_THAT(none.manifest->entries, IsEmpty());
}

// --- M1 -------------------------------------------------------------------

TEST(ManifestTest, M1BadMagicIsDataLoss) {
  ManifestBytes b;
  b.Raw("XTCUDAFQN0").U32(1).Variant(0, 0, 0, "so").U32(0);
  const Decoded d = Decode(b.bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M1"));
  EXPECT_EQ(d.report.errors()[0].code, absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseManifest(b.bytes()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ManifestTest, M1TransitionalMagicIsUnimplemented) {
  ManifestBytes b;
  b.Raw("ETCUDAFQN4").U32(1).Variant(0, 0, 0, "so").U32(0);
  const Decoded d = Decode(b.bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M1"));
  // Names the version found and the layouts this reader reads.
  EXPECT_THAT(d.report, ::ptd::testing::HasError(
                            "M1", AllOf(::ptd::testing::CodeIs(absl::StatusCode::kUnimplemented),
                                        ::ptd::testing::MessageHas("'ETCUDAFQN4'"),
                                        ::ptd::testing::MessageHas("'ETCUDAFQN0'"),
                                        ::ptd::testing::MessageHas("'ETCUDAFQN3'"))));
  EXPECT_EQ(ParseManifest(b.bytes()).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ManifestTest, M1EveryTransitionalVersionIsUnimplemented) {
  for (char v : {'1', '2', '4', '5', '6', '7', '8', '9'}) {
    std::string magic = "ETCUDAFQN";
    magic += v;
    ManifestBytes b;
    b.Raw(magic).U32(1).Variant(0, 0, 0, "so").U32(0);
    const Decoded d = Decode(b.bytes());
    EXPECT_FALSE(d.manifest.has_value()) << magic;
    EXPECT_THAT(Rules(d.report), ElementsAre("M1")) << magic;
    EXPECT_EQ(ParseManifest(b.bytes()).status().code(), absl::StatusCode::kUnimplemented) << magic;
  }
}

// --- ETCUDAFQN3, the released layout ----------------------------------------

// "ETCUDAFQN3", the so_blob_key, then the entries as in ETCUDAFQN0.
ManifestBytes Released(std::string_view so_blob_key, const std::vector<EntryFields>& es) {
  ManifestBytes b;
  b.Raw("ETCUDAFQN3").Str(so_blob_key).U32(static_cast<uint32_t>(es.size()));
  for (const EntryFields& e : es) b.Entry(e);
  return b;
}

TEST(ManifestTest, Fqn3ReadsAsOneUntargetedVariant) {
  EntryFields e;
  e.offset = 2;
  const Decoded d = Decode(Released("so_blob", {e}).bytes());
  ASSERT_TRUE(d.report.ok()) << Messages(d.report);
  ASSERT_TRUE(d.manifest.has_value());
  EXPECT_EQ(d.manifest->format, ManifestFormat::kFqn3);
  ASSERT_EQ(d.manifest->variants.size(), 1u);
  const Variant& v = d.manifest->variants[0];
  EXPECT_EQ(v.target_sm, 0u);
  EXPECT_EQ(v.ptx_compute, 0u);
  EXPECT_EQ(v.flags, 0u);
  EXPECT_EQ(v.so_blob_key, "so_blob");
  ASSERT_EQ(d.manifest->entries.size(), 1u);
  EXPECT_EQ(d.manifest->entries[0].storage_offset, 2);
  EXPECT_THAT(d.manifest->entries[0].sizes, ElementsAre(3, 4));
  // The same manifest in ETCUDAFQN0 decodes to the same variant and entries.
  const Decoded fqn0 = Decode(ManifestBytes::WithEntries({e}));
  EXPECT_EQ(fqn0.manifest->format, ManifestFormat::kFqn0);
  EXPECT_EQ(fqn0.manifest->variants[0].so_blob_key, v.so_blob_key);
  EXPECT_EQ(fqn0.manifest->entries[0].sizes, d.manifest->entries[0].sizes);
}

TEST(ManifestTest, FormatNames) {
  EXPECT_EQ(ManifestFormatName(ManifestFormat::kFqn0), "ETCUDAFQN0");
  EXPECT_EQ(ManifestFormatName(ManifestFormat::kFqn3), "ETCUDAFQN3");
}

TEST(ManifestTest, Fqn3EmptySoBlobKeyIsM4) {
  const Decoded d = Decode(Released("", {EntryFields{}}).bytes());
  EXPECT_THAT(Rules(d.report), ElementsAre("M4"));
  EXPECT_THAT(d.report.errors()[0].message, HasSubstr("so_blob_key is empty"));
}

TEST(ManifestTest, Fqn3TruncatedInSoBlobKeyIsM2) {
  std::vector<uint8_t> bytes = Released("so_blob", {}).bytes();
  bytes.resize(10 + 4 + 3);  // Magic, length, 3 of the 7 key bytes.
  const Decoded d = Decode(bytes);
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M2"));
  EXPECT_THAT(d.report.errors()[0].message, HasSubstr("so_blob_key"));
}

TEST(ManifestTest, Fqn3EveryProperPrefixIsTruncated) {
  const std::vector<uint8_t> full = Released("so", {EntryFields{}}).bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    const Decoded d = Decode(std::vector<uint8_t>(full.begin(), full.begin() + n));
    EXPECT_FALSE(d.manifest.has_value()) << n;
    EXPECT_THAT(Rules(d.report), ElementsAre("M2")) << n;
  }
}

TEST(ManifestTest, Fqn3EntryRulesApplyUnchanged) {
  EntryFields bad;
  bad.dtype = 99;
  EntryFields dup;
  ManifestBytes b = Released("so", {dup, dup, bad});
  b.Raw("x");
  const Decoded d = Decode(b.bytes());
  ASSERT_TRUE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M3", "M5", "M6"));
}

TEST(ManifestTest, Fqn3K03RoundTripsByteExactlyAndMatchesK01) {
  const std::vector<uint8_t> k03 = ReadConformance("k03_released_fqn3.manifest");
  ASSERT_FALSE(k03.empty());
  absl::StatusOr<Manifest> m = ParseManifest(k03, "k03");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format, ManifestFormat::kFqn3);
  absl::StatusOr<std::vector<uint8_t>> encoded = EncodeManifest(*m);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, k03);

  absl::StatusOr<Manifest> k01 =
      ParseManifest(ReadConformance("k01_view_geometry.manifest"), "k01");
  ASSERT_TRUE(k01.ok()) << k01.status();
  EXPECT_EQ(k01->format, ManifestFormat::kFqn0);
  ASSERT_EQ(k01->variants.size(), 1u);
  EXPECT_EQ(k01->variants[0].so_blob_key, m->variants[0].so_blob_key);
  ASSERT_EQ(k01->entries.size(), m->entries.size());
  for (size_t i = 0; i < m->entries.size(); ++i) {
    EXPECT_EQ(k01->entries[i].fqn, m->entries[i].fqn);
    EXPECT_EQ(k01->entries[i].sizes, m->entries[i].sizes);
    EXPECT_EQ(k01->entries[i].strides, m->entries[i].strides);
    EXPECT_EQ(k01->entries[i].storage_offset, m->entries[i].storage_offset);
  }
  // k01 re-encoded as ETCUDAFQN3 is k03.
  k01->format = ManifestFormat::kFqn3;
  absl::StatusOr<std::vector<uint8_t>> as_fqn3 = EncodeManifest(*k01);
  ASSERT_TRUE(as_fqn3.ok()) << as_fqn3.status();
  EXPECT_EQ(*as_fqn3, k03);
}

TEST(ManifestTest, Fqn3EncoderWritesTheWireLayout) {
  Manifest m{.format = ManifestFormat::kFqn3, .variants = {V(0, 0, 0, "so_blob")}};
  m.entries.push_back(WeightEntry{.fqn = "layers.0.w",
                                  .storage_key = "cuda_fqn_weight:cuda:layers.0.w",
                                  .storage_nbytes = 48,
                                  .dtype = 6,
                                  .device_type = 1,
                                  .storage_offset = 0,
                                  .sizes = {3, 4},
                                  .strides = {4, 1}});
  absl::StatusOr<std::vector<uint8_t>> encoded = EncodeManifest(m);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, Released("so_blob", {EntryFields{}}).bytes());
}

TEST(ManifestTest, Fqn3EncoderNeedsOneUntargetedVariant) {
  const struct {
    std::vector<Variant> variants;
    const char* why;
  } cases[] = {
      {{}, "has 0"},
      {{V(80, 0, 0, "a"), V(90, 0, 0, "b")}, "has 2"},
      {{V(80, 0, 0, "a")}, "target_sm 80"},
      {{V(0, 70, 0, "a")}, "ptx_compute 70"},
      {{V(0, 0, 1, "a")}, "flags 1"},
  };
  for (const auto& c : cases) {
    const Manifest m{.format = ManifestFormat::kFqn3, .variants = c.variants};
    const absl::Status s = EncodeManifest(m).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.why;
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("ETCUDAFQN3"), HasSubstr(c.why)));
  }
  // An empty key is still M4, as the decoder says.
  const Manifest empty_key{.format = ManifestFormat::kFqn3, .variants = {V(0, 0, 0, "")}};
  EXPECT_THAT(std::string(EncodeManifest(empty_key).status().message()),
              HasSubstr("so_blob_key is empty"));
}

// --- M2 -------------------------------------------------------------------

TEST(ManifestTest, M2FewerThanTenBytes) {
  for (const std::string s : {"", "E", "ETCUDAFQN"}) {
    const Decoded d = Decode(std::vector<uint8_t>(s.begin(), s.end()));
    EXPECT_FALSE(d.manifest.has_value()) << s.size();
    EXPECT_THAT(Rules(d.report), ElementsAre("M2")) << s.size();
  }
  const Decoded d = Decode(std::vector<uint8_t>{'E', 'T', 'C'});
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("3"), HasSubstr("10")));
}

// Offsets of the fields of a one-variant, one-entry manifest.
struct Layout {
  std::vector<uint8_t> bytes;
  size_t variant = 0;   // target_sm of variant 0.
  size_t key_len = 0;   // Length of so_blob_key.
  size_t key_body = 0;  // Bytes of so_blob_key.
  size_t num_entries = 0;
  size_t fqn_body = 0;
  size_t nbytes = 0;  // storage_nbytes of entry 0.
  size_t sizes = 0;
  size_t strides = 0;
};

Layout OneEntryLayout() {
  Layout l;
  ManifestBytes b;
  b.Magic().U32(1);
  l.variant = b.size();
  b.U32(80).U32(0).U32(0);
  l.key_len = b.size();
  b.U32(7);
  l.key_body = b.size();
  b.Raw("so_blob");
  l.num_entries = b.size();
  b.U32(1);
  b.Str("w");
  l.fqn_body = b.size() - 1;
  b.Str("cuda_fqn_weight:cuda:w");
  l.nbytes = b.size();
  b.Int<uint64_t>(48).Int<int32_t>(6).Int<int32_t>(1).Int<int64_t>(0).U32(2);
  l.sizes = b.size();
  b.Int<int64_t>(3).Int<int64_t>(4);
  l.strides = b.size();
  b.Int<int64_t>(4).Int<int64_t>(1);
  l.bytes = b.bytes();
  return l;
}

void ExpectTruncated(const Layout& l, size_t keep, std::string_view what) {
  SCOPED_TRACE(::testing::Message() << "cut at " << keep << " (" << what << ")");
  const std::vector<uint8_t> cut(l.bytes.begin(), l.bytes.begin() + keep);
  const Decoded d = Decode(cut);
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M2"));
  ASSERT_FALSE(d.report.errors().empty());
  EXPECT_THAT(d.report.errors()[0].message, HasSubstr(std::string(what)));
  EXPECT_EQ(d.report.errors()[0].code, absl::StatusCode::kDataLoss);
}

TEST(ManifestTest, M2TruncatedInVariant) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.variant + 2, "variant 0");
  ExpectTruncated(l, l.variant + 6, "variant 0");
}

TEST(ManifestTest, M2TruncatedInStringLength) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.key_len + 3, "variant 0");
}

TEST(ManifestTest, M2TruncatedInStringBody) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.key_body + 3, "variant 0");
  ExpectTruncated(l, l.fqn_body, "entry 0");
}

TEST(ManifestTest, M2TruncatedBeforeEntryCount) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.num_entries + 1, "num_entries");
}

TEST(ManifestTest, M2TruncatedInEntry) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.nbytes + 5, "entry 0");
  ExpectTruncated(l, l.sizes - 2, "entry 0");  // In ndim.
}

TEST(ManifestTest, M2TruncatedInDims) {
  const Layout l = OneEntryLayout();
  ExpectTruncated(l, l.sizes + 12, "entry 0");
  ExpectTruncated(l, l.strides + 15, "entry 0");
}

TEST(ManifestTest, M2EveryProperPrefixIsTruncated) {
  const Layout l = OneEntryLayout();
  ASSERT_TRUE(Decode(l.bytes).report.ok());
  for (size_t keep = 0; keep < l.bytes.size(); ++keep) {
    const Decoded d = Decode({l.bytes.begin(), l.bytes.begin() + keep});
    EXPECT_FALSE(d.manifest.has_value()) << keep;
    EXPECT_THAT(Rules(d.report), ElementsAre("M2")) << keep;
  }
}

// The M2 message gives the place in the manifest as a file offset and the
// manifest's size, like M3 does.
TEST(ManifestTest, M2MessageGivesFileOffsetAndSize) {
  const Layout l = OneEntryLayout();
  // 16 bytes: magic, num_variants, 2 of target_sm's 4 bytes.
  const Decoded d = Decode({l.bytes.begin(), l.bytes.begin() + 16});
  ASSERT_THAT(Rules(d.report), ElementsAre("M2"));
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("offset 14"), HasSubstr("of 16")));
}

// --- M3 -------------------------------------------------------------------

TEST(ManifestTest, M3TrailingBytes) {
  std::vector<uint8_t> b = ManifestBytes::WithEntries({EntryFields{}});
  const size_t size = b.size();
  b.insert(b.end(), {0, 0, 0});
  const Decoded d = Decode(b);
  ASSERT_TRUE(d.manifest.has_value());  // The structure was readable.
  EXPECT_EQ(d.manifest->entries.size(), 1u);
  EXPECT_THAT(Rules(d.report), ElementsAre("M3"));
  EXPECT_THAT(d.report.errors()[0].message,
              AllOf(HasSubstr("3 trailing bytes"), HasSubstr(std::to_string(size)),
                    HasSubstr(std::to_string(size + 3))));
  EXPECT_EQ(ParseManifest(b).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ManifestTest, M3ConformanceTrailingBytesFile) {
  const std::vector<uint8_t> b = ReadConformance("k15_manifest_trailing_bytes.manifest");
  ASSERT_FALSE(b.empty());
  const Decoded d = Decode(b);
  EXPECT_TRUE(d.report.HasError("M3")) << Messages(d.report);
}

// --- M4 -------------------------------------------------------------------

void ExpectM4(const std::vector<Variant>& vs, const std::vector<std::string>& parts) {
  const Decoded d = Decode(ManifestBytes::WithVariants(vs));
  EXPECT_THAT(Rules(d.report), ElementsAre("M4"));
  const std::string messages = Messages(d.report);
  for (const std::string& p : parts) EXPECT_THAT(messages, HasSubstr(p));
  EXPECT_FALSE(EncodeManifest(Manifest{.variants = vs}).ok());
}

TEST(ManifestTest, M4ZeroVariants) {
  ManifestBytes b;
  b.Magic().U32(0).U32(0);
  const Decoded d = Decode(b.bytes());
  EXPECT_THAT(Rules(d.report), ElementsAre("M4"));
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("0"), HasSubstr("256")));
}

TEST(ManifestTest, M4TooManyVariants) {
  ManifestBytes b;
  b.Magic().U32(257);  // No variants follow: the count alone is rejected.
  const Decoded d = Decode(b.bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M4"));
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("257"), HasSubstr("256")));
}

TEST(ManifestTest, M4PtxAboveTarget) { ExpectM4({V(80, 90, 0, "so")}, {"90", "80"}); }

TEST(ManifestTest, M4FlagBitsOtherThanFallback) {
  ExpectM4({V(80, 0, 2, "so")}, {"flags"});
  ExpectM4({V(90, 0, 0, "a"), V(80, 75, 0x80000001u, "b")}, {"flags"});
}

TEST(ManifestTest, M4EmptySoBlobKey) { ExpectM4({V(80, 0, 0, "")}, {"so_blob_key"}); }

TEST(ManifestTest, M4InvalidUtf8SoBlobKey) { ExpectM4({V(80, 0, 0, "so\xff")}, {"UTF-8"}); }

TEST(ManifestTest, M4UntargetedNotAlone) {
  ExpectM4({V(0, 0, 0, "a"), V(80, 0, 0, "b")}, {"untargeted"});
}

TEST(ManifestTest, M4UntargetedWithPtx) { ExpectM4({V(0, 70, 0, "a")}, {"untargeted", "70"}); }

TEST(ManifestTest, M4UntargetedFallback) { ExpectM4({V(0, 0, 1, "a")}, {"untargeted"}); }

TEST(ManifestTest, M4TwoFallbacks) {
  ExpectM4({V(90, 0, 0, "a"), V(80, 75, 1, "b"), V(86, 80, 1, "c")}, {"fallback"});
}

TEST(ManifestTest, M4FallbackWithoutPtx) {
  ExpectM4({V(90, 0, 0, "a"), V(80, 0, 1, "b")}, {"ptx_compute 0"});
}

TEST(ManifestTest, M4DuplicateTargets) { ExpectM4({V(80, 0, 0, "a"), V(80, 0, 0, "b")}, {"80"}); }

TEST(ManifestTest, M4NonFallbackWithPtxInMultiVariantManifest) {
  ExpectM4({V(90, 0, 0, "a"), V(80, 80, 0, "b")}, {"ptx_compute 80"});
}

TEST(ManifestTest, M4ValidVariantSets) {
  for (const std::vector<Variant>& vs : std::vector<std::vector<Variant>>{
           {V(0, 0, 0, "a")},
           {V(80, 0, 0, "a")},
           {V(80, 75, 0, "a")},  // A single variant may carry PTX.
           {V(90, 0, 0, "a"), V(80, 0, 0, "b")},
           // A fallback may share a target with a non-fallback variant.
           {V(90, 0, 0, "a"), V(80, 0, 0, "b"), V(80, 75, 1, "c")},
       }) {
    const Decoded d = Decode(ManifestBytes::WithVariants(vs));
    EXPECT_TRUE(d.report.ok()) << Messages(d.report);
  }
}

// --- M5 -------------------------------------------------------------------

TEST(ManifestTest, M5TooManyEntriesRejectedBeforeAllocation) {
  ManifestBytes b = ManifestBytes::Untargeted();
  b.U32(kMaxManifestEntries + 1);  // And no entries.
  const Decoded d = Decode(b.bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M5"));
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("1048577"), HasSubstr("1048576")));
}

// A list of 20,000 entries is decoded in two halves at once (from 16,384):
// entries, errors and warnings must be exactly those of decoding from start
// to end, including around the split at entry 10,000, and framing errors in
// either half must name the entry where the bytes stop.
class LargeManifest {
 public:
  static constexpr uint32_t kEntries = 20000;
  LargeManifest() {
    for (uint32_t i = 0; i < kEntries; ++i) {
      EntryFields e;
      e.fqn = absl::StrCat("w", i);
      e.key = absl::StrCat("cuda_fqn_weight:cuda:w", i);
      e.sizes = {i % 7 + 1, 4};
      e.strides = {4, 1};
      e.nbytes = (i % 7 + 1) * 16;
      if (i == 3 || i == 9999 || i == 10000 || i == 19999) e.dtype = 99;  // M5.
      if (i == 5 || i == 15000) e.dtype = 7;                              // float64: U1.
      if (i == 12000) e.fqn = "w7";                                       // M6 with entry 7.
      entries.push_back(e);
    }
  }
  // The manifest's bytes, ending 10 bytes into entry `cut` when there is
  // one (inside its fqn), then `trailing` zero bytes.
  std::vector<uint8_t> Bytes(std::optional<uint32_t> cut = std::nullopt, size_t trailing = 0) {
    ManifestBytes b = ManifestBytes::Untargeted();
    b.U32(kEntries);
    size_t cut_at = 0;
    for (uint32_t i = 0; i < kEntries; ++i) {
      if (cut && i == *cut) cut_at = b.size() + 10;
      b.Entry(entries[i]);
    }
    std::vector<uint8_t> bytes = b.bytes();
    if (cut) bytes.resize(cut_at);
    bytes.insert(bytes.end(), trailing, 0);
    return bytes;
  }
  std::vector<EntryFields> entries;
};

std::vector<std::string> RulesInOrder(const std::vector<Diagnostic>& ds) {
  std::vector<std::string> out;
  for (const Diagnostic& d : ds) out.push_back(d.rule + " " + d.fqn.value_or("-"));
  return out;
}

TEST(ManifestTest, LargeListDecodedInHalvesIsTheListInOrder) {
  LargeManifest lm;
  const std::vector<uint8_t> bytes = lm.Bytes();
  const Decoded d = Decode(bytes);
  ASSERT_TRUE(d.manifest.has_value()) << Messages(d.report);
  ASSERT_EQ(d.manifest->entries.size(), LargeManifest::kEntries);
  for (uint32_t i = 0; i < LargeManifest::kEntries; ++i) {
    const WeightEntry& e = d.manifest->entries[i];
    const EntryFields& want = lm.entries[i];
    ASSERT_EQ(e.fqn, want.fqn) << i;
    ASSERT_EQ(e.storage_key, want.key) << i;
    ASSERT_EQ(e.dtype, want.dtype) << i;
    ASSERT_EQ(e.storage_nbytes, want.nbytes) << i;
    ASSERT_THAT(e.sizes, ElementsAre(want.sizes[0], want.sizes[1])) << i;
    ASSERT_THAT(e.strides, ElementsAre(4, 1)) << i;
    const bool bad = i == 3 || i == 9999 || i == 10000 || i == 19999 || i == 12000;
    ASSERT_EQ(e.well_formed, !bad) << i;
  }
  EXPECT_THAT(RulesInOrder(d.report.errors()),
              ElementsAre("M5 w3", "M5 w9999", "M5 w10000", "M5 w19999", "M6 w7"));
  EXPECT_THAT(d.report.errors()[4].message, HasSubstr("entries 7 and 12000"));
  EXPECT_THAT(RulesInOrder(d.report.warnings()), ElementsAre("U1 w5", "U1 w15000"));

  // Trailing bytes after the last entry (the second half's end): M3 at the
  // offset where the entries end.
  const Decoded t = Decode(lm.Bytes(std::nullopt, 5));
  ASSERT_TRUE(t.manifest.has_value());
  ASSERT_TRUE(t.report.HasError("M3"));
  EXPECT_THAT(
      Messages(t.report),
      HasSubstr(absl::StrCat("5 trailing bytes after the last entry, at offset ", bytes.size())));
}

TEST(ManifestTest, LargeListCutShortInEitherHalfIsM2AtThatEntry) {
  LargeManifest lm;
  // In the second half (decoded beside the first): the first half's and the
  // second half's errors up to the cut, then M2 naming entry 15000.
  const Decoded second = Decode(lm.Bytes(15000));
  EXPECT_FALSE(second.manifest.has_value());
  EXPECT_THAT(RulesInOrder(second.report.errors()),
              ElementsAre("M5 w3", "M5 w9999", "M5 w10000", "M2 -"));
  EXPECT_THAT(second.report.errors().back().message, HasSubstr("entry 15000"));
  // In the first half (its entries do not frame: decoded from start to end).
  const Decoded first = Decode(lm.Bytes(5000));
  EXPECT_FALSE(first.manifest.has_value());
  EXPECT_THAT(RulesInOrder(first.report.errors()), ElementsAre("M5 w3", "M2 -"));
  EXPECT_THAT(first.report.errors().back().message, HasSubstr("entry 5000"));
}

TEST(ManifestTest, LargeListWithTooManyDimsInTheSecondHalfIsM5) {
  LargeManifest lm;
  lm.entries[17000].sizes.assign(65, 1);
  lm.entries[17000].strides.assign(65, 1);
  const Decoded d = Decode(lm.Bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(RulesInOrder(d.report.errors()),
              ElementsAre("M5 w3", "M5 w9999", "M5 w10000", "M5 w17000"));
  EXPECT_THAT(d.report.errors().back().message, HasSubstr("ndim is 65"));
}

TEST(ManifestTest, M2EntryCountAtLimitWithoutEntries) {
  // 2^20 is allowed, but the bytes end: M2, without reserving 2^20 entries.
  ManifestBytes b = ManifestBytes::Untargeted();
  b.U32(kMaxManifestEntries);
  const Decoded d = Decode(b.bytes());
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M2"));
}

TEST(ManifestTest, M5TooManyDims) {
  EntryFields e;
  e.ndim = 65;
  e.sizes.assign(65, 1);
  e.strides.assign(65, 1);
  const Decoded d = Decode(ManifestBytes::WithEntries({e}));
  EXPECT_FALSE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M5"));
  EXPECT_THAT(d.report.errors()[0].message, AllOf(HasSubstr("65"), HasSubstr("64")));

  EntryFields ok;
  ok.sizes.assign(64, 1);
  ok.strides.assign(64, 0);
  EXPECT_TRUE(Decode(ManifestBytes::WithEntries({ok})).report.ok());
}

// Decodes one entry that breaks M5: the manifest is still returned (the
// structure was readable) with the entry marked not well-formed.
void ExpectM5Entry(const EntryFields& e, const std::vector<std::string>& parts) {
  const Decoded d = Decode(ManifestBytes::WithEntries({e}));
  ASSERT_TRUE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M5"));
  ASSERT_EQ(d.manifest->entries.size(), 1u);
  EXPECT_FALSE(d.manifest->entries[0].well_formed);
  const std::string messages = Messages(d.report);
  for (const std::string& p : parts) EXPECT_THAT(messages, HasSubstr(p));
  EXPECT_EQ(ParseManifest(ManifestBytes::WithEntries({e})).status().code(),
            absl::StatusCode::kDataLoss);
  // The encoder refuses what the decoder rejects.
  if (d.manifest) {
    EXPECT_EQ(EncodeManifest(*d.manifest).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ManifestTest, M5NegativeSize) {
  EntryFields e;
  e.sizes = {3, -4};
  ExpectM5Entry(e, {"sizes[1]", "-4"});
}

TEST(ManifestTest, M5NegativeStride) {
  EntryFields e;
  e.strides = {-4, 1};
  ExpectM5Entry(e, {"strides[0]", "-4"});
}

TEST(ManifestTest, M5NegativeOffset) {
  EntryFields e;
  e.offset = -1;
  ExpectM5Entry(e, {"storage_offset", "-1"});
}

TEST(ManifestTest, M5UnknownDtype) {
  EntryFields e;
  e.dtype = 30;
  ExpectM5Entry(e, {"dtype 30"});
  e.dtype = -1;
  ExpectM5Entry(e, {"dtype -1"});
}

TEST(ManifestTest, M5KnownDtypesAccepted) {
  for (int32_t t = 0; t <= 29; ++t) {
    EntryFields e;
    e.dtype = t;
    EXPECT_TRUE(Decode(ManifestBytes::WithEntries({e})).report.ok()) << t;
  }
}

TEST(ManifestTest, M5BadDeviceType) {
  EntryFields e;
  e.device_type = 2;
  ExpectM5Entry(e, {"device_type 2"});
  e.device_type = 0;  // CPU is fine.
  EXPECT_TRUE(Decode(ManifestBytes::WithEntries({e})).report.ok());
}

TEST(ManifestTest, M5EmptyFqn) {
  EntryFields e;
  e.fqn = "";
  ExpectM5Entry(e, {"fqn is empty"});
}

TEST(ManifestTest, M5EmptyStorageKey) {
  EntryFields e;
  e.key = "";
  ExpectM5Entry(e, {"storage_key is empty"});
}

TEST(ManifestTest, M5InvalidUtf8) {
  EntryFields e;
  e.fqn = "layers.\xc3(";
  ExpectM5Entry(e, {"fqn", "UTF-8"});
  EntryFields k;
  k.key = "cuda_fqn_weight:cuda:\xed\xa0\x80";  // A UTF-16 surrogate.
  ExpectM5Entry(k, {"storage_key", "UTF-8"});
}

TEST(ManifestTest, M5OnlyTheBadEntryIsMarked) {
  EntryFields good;
  EntryFields bad;
  bad.fqn = "bad";
  bad.strides = {4, -1};
  const Decoded d = Decode(ManifestBytes::WithEntries({good, bad}));
  ASSERT_TRUE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M5"));
  EXPECT_TRUE(d.manifest->entries[0].well_formed);
  EXPECT_FALSE(d.manifest->entries[1].well_formed);
  EXPECT_EQ(d.report.errors()[0].fqn, "bad");
}

// --- M6 -------------------------------------------------------------------

TEST(ManifestTest, M6DuplicateFqn) {
  EntryFields a;
  EntryFields b;
  b.key = "cuda_fqn_weight:cuda:other";
  const Decoded d = Decode(ManifestBytes::WithEntries({a, EntryFields{.fqn = "x", .key = "k"}, b}));
  ASSERT_TRUE(d.manifest.has_value());
  EXPECT_THAT(Rules(d.report), ElementsAre("M6"));
  EXPECT_THAT(d.report.errors()[0].message,
              AllOf(HasSubstr("layers.0.w"), HasSubstr("entries 0 and 2")));
  EXPECT_TRUE(d.manifest->entries[0].well_formed);
  EXPECT_FALSE(d.manifest->entries[2].well_formed);
  EXPECT_FALSE(EncodeManifest(*d.manifest).ok());
}

TEST(ManifestTest, M6SameStorageKeyIsFine) {
  EntryFields a;
  EntryFields b;
  b.fqn = "layers.0.w2";  // Another view of the same storage key.
  EXPECT_TRUE(Decode(ManifestBytes::WithEntries({a, b})).report.ok());
}

// --- Encoder -----------------------------------------------------------------

void ExpectByteExactRoundTrip(const std::string& name) {
  SCOPED_TRACE(name);
  const std::vector<uint8_t> original = ReadConformance(name);
  ASSERT_FALSE(original.empty());
  absl::StatusOr<Manifest> m = ParseManifest(original, name);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::vector<uint8_t>> encoded = EncodeManifest(*m);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, original);
}

TEST(ManifestTest, EncoderRoundTripsK01ByteExactly) {
  ExpectByteExactRoundTrip("k01_view_geometry.manifest");
}

TEST(ManifestTest, EncoderRoundTripsK02ByteExactly) {
  ExpectByteExactRoundTrip("k02_one_storage_key_many_views.manifest");
}

TEST(ManifestTest, EncoderWritesTheWireLayout) {
  const std::vector<uint8_t> expected = ManifestBytes::WithEntries({EntryFields{}});
  Manifest m;
  m.variants = {V(0, 0, 0, "so_blob")};
  m.entries.push_back(WeightEntry{.fqn = "layers.0.w",
                                  .storage_key = "cuda_fqn_weight:cuda:layers.0.w",
                                  .storage_nbytes = 48,
                                  .dtype = 6,
                                  .device_type = 1,
                                  .storage_offset = 0,
                                  .sizes = {3, 4},
                                  .strides = {4, 1}});
  absl::StatusOr<std::vector<uint8_t>> encoded = EncodeManifest(m);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(*encoded, expected);
}

TEST(ManifestTest, EncoderRejectsWhatTheDecoderRejects) {
  const auto entry = [] {
    return WeightEntry{.fqn = "w",
                       .storage_key = "k",
                       .storage_nbytes = 48,
                       .dtype = 6,
                       .device_type = 1,
                       .storage_offset = 0,
                       .sizes = {3, 4},
                       .strides = {4, 1}};
  };
  std::vector<std::pair<std::string, Manifest>> cases;
  cases.push_back({"no variants", Manifest{.entries = {entry()}}});
  {
    Manifest m{.variants = {V(80, 90, 0, "so")}};
    cases.push_back({"ptx above target", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry(), entry()}};
    cases.push_back({"duplicate fqn", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].dtype = 30;
    cases.push_back({"unknown dtype", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].strides = {4};
    cases.push_back({"rank mismatch", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].sizes.assign(65, 1);
    m.entries[0].strides.assign(65, 1);
    cases.push_back({"ndim 65", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].storage_offset = -8;
    cases.push_back({"negative offset", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].storage_key = "";
    cases.push_back({"empty storage key", m});
  }
  {
    Manifest m{.variants = {V(0, 0, 0, "so")}, .entries = {entry()}};
    m.entries[0].device_type = 7;
    cases.push_back({"device type 7", m});
  }
  {
    Manifest m;
    m.variants.assign(257, V(0, 0, 0, "so"));
    cases.push_back({"257 variants", m});
  }
  for (const auto& [name, m] : cases) {
    EXPECT_EQ(EncodeManifest(m).status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

// --- SelectVariant -----------------------------------------------------------

TEST(ManifestTest, SelectSingleUntargetedWinsForAnySm) {
  const std::vector<Variant> vs = {V(0, 0, 0, "so")};
  for (uint32_t sm : {0u, 50u, 75u, 80u, 90u, 120u}) {
    absl::StatusOr<VariantChoice> c = SelectVariant(vs, sm);
    ASSERT_TRUE(c.ok()) << sm;
    EXPECT_EQ(c->index, 0u);
    EXPECT_FALSE(c->via_ptx);
  }
}

TEST(ManifestTest, SelectExactTarget) {
  const std::vector<Variant> vs = {V(80, 0, 0, "a"), V(90, 0, 0, "b"), V(120, 0, 0, "c")};
  absl::StatusOr<VariantChoice> c = SelectVariant(vs, 90);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index, 1u);
  EXPECT_FALSE(c->via_ptx);
}

TEST(ManifestTest, SelectFallbackViaPtx) {
  const std::vector<Variant> vs = {V(90, 0, 0, "a"), V(80, 80, 1, "fb")};
  absl::StatusOr<VariantChoice> c = SelectVariant(vs, 86);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index, 1u);
  EXPECT_TRUE(c->via_ptx);
  // ptx_compute == sm is enough.
  c = SelectVariant(vs, 80);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index, 1u);
  EXPECT_TRUE(c->via_ptx);
}

TEST(ManifestTest, SelectSingleVariantWithPtx) {
  const std::vector<Variant> vs = {V(80, 75, 0, "a")};
  absl::StatusOr<VariantChoice> exact = SelectVariant(vs, 80);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->index, 0u);
  EXPECT_FALSE(exact->via_ptx);
  absl::StatusOr<VariantChoice> jit = SelectVariant(vs, 86);
  ASSERT_TRUE(jit.ok()) << jit.status();
  EXPECT_EQ(jit->index, 0u);
  EXPECT_TRUE(jit->via_ptx);
  EXPECT_EQ(SelectVariant(vs, 70).status().code(), absl::StatusCode::kNotFound);
}

TEST(ManifestTest, SelectNoneFits) {
  const std::vector<Variant> vs = {V(90, 0, 0, "a"), V(86, 80, 1, "fb")};
  absl::StatusOr<VariantChoice> c = SelectVariant(vs, 75);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("no variant fits sm 75"));
  // A targeted variant without PTX never serves another sm.
  EXPECT_EQ(SelectVariant({V(80, 0, 0, "a")}, 90).status().code(), absl::StatusCode::kNotFound);
}

TEST(ManifestTest, SelectPrefersExactMatchOverFallback) {
  // The fallback comes first and would fit through PTX; the exact match wins.
  const std::vector<Variant> vs = {V(80, 75, 1, "fb"), V(90, 0, 0, "a")};
  absl::StatusOr<VariantChoice> c = SelectVariant(vs, 90);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index, 1u);
  EXPECT_FALSE(c->via_ptx);
  // A fallback is never chosen as an exact match.
  c = SelectVariant(vs, 80);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->index, 0u);
  EXPECT_TRUE(c->via_ptx);
}

TEST(ManifestTest, SelectNonFallbackMultiVariantNeverViaPtx) {
  // With several variants, only a fallback is a PTX candidate.
  const std::vector<Variant> vs = {V(90, 0, 0, "a"), V(80, 0, 0, "b")};
  EXPECT_EQ(SelectVariant(vs, 86).status().code(), absl::StatusCode::kNotFound);
}

// --- U1: dtypes upstream's CUDA runtime refuses --------------------------------

std::vector<std::string> WarningRules(const Report& r) {
  std::vector<std::string> rules;
  for (const Diagnostic& d : r.warnings()) rules.push_back(d.rule);
  return rules;
}

TEST(ManifestTest, U1ExactlyForDtypesOutsideUpstreamsNine) {
  const std::set<int> accepted = {0, 1, 2, 3, 4, 5, 6, 11, 15};
  for (int dtype = 0; dtype < 30; ++dtype) {
    SCOPED_TRACE(dtype);
    EntryFields e;
    e.dtype = dtype;
    e.nbytes = 1024;  // Any element size fits.
    const Decoded d = Decode(ManifestBytes::WithEntries({e}));
    ASSERT_TRUE(d.report.ok()) << Messages(d.report);  // The verdict never changes.
    ASSERT_TRUE(d.manifest.has_value());
    EXPECT_TRUE(d.manifest->entries[0].well_formed);
    EXPECT_EQ(UpstreamCudaAcceptsDtype(dtype), accepted.count(dtype) > 0);
    if (accepted.count(dtype)) {
      EXPECT_THAT(WarningRules(d.report), IsEmpty());
    } else {
      EXPECT_THAT(WarningRules(d.report), ElementsAre("U1"));
      const Diagnostic& w = d.report.warnings()[0];
      EXPECT_EQ(w.fqn, "layers.0.w");
      EXPECT_EQ(w.key, "cuda_fqn_weight:cuda:layers.0.w");
      EXPECT_EQ(w.file, "test.manifest");
      EXPECT_THAT(w.message,
                  AllOf(HasSubstr("weight 'layers.0.w'"),
                        HasSubstr(absl::StrCat("dtype ", std::string(ScalarTypeName(dtype)), " (",
                                               dtype, ")")),
                        HasSubstr("Byte, Char, Short, Int, Long, Half, Float, Bool and "
                                  "BFloat16 (U1)")));
    }
  }
}

TEST(ManifestTest, U1NotForAnUnknownDtype) {
  // An unknown dtype is M5 (an error), not also U1.
  EntryFields e;
  e.dtype = 30;
  const Decoded d = Decode(ManifestBytes::WithEntries({e}));
  EXPECT_THAT(Rules(d.report), ElementsAre("M5"));
  EXPECT_THAT(WarningRules(d.report), IsEmpty());
}

TEST(ManifestTest, U1Float64InBothLayouts) {
  // The SPEC's example: a float64 buffer, as executorch 1.5.1 exports it.
  EntryFields e;
  e.fqn = "rope.freqs";
  e.key = "cuda_fqn_weight:cuda:rope.freqs";
  e.dtype = 7;
  e.nbytes = 96;
  for (const std::vector<uint8_t>& bytes :
       {ManifestBytes::WithEntries({e}), Released("so_blob", {e}).bytes()}) {
    const Decoded d = Decode(bytes);
    ASSERT_TRUE(d.report.ok()) << Messages(d.report);
    ASSERT_THAT(WarningRules(d.report), ElementsAre("U1"));
    EXPECT_EQ(d.report.warnings()[0].message,
              "weight 'rope.freqs': dtype Double (7) is refused by upstream's CUDA runtime, "
              "which loads only Byte, Char, Short, Int, Long, Half, Float, Bool and BFloat16 "
              "(U1)");
  }
}

}  // namespace
}  // namespace ptd
