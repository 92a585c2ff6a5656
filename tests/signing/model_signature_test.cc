// Signed models (docs/SPEC.md section 8): the signature's rules A1-A7, the
// signed folder, and the load that hashes the .ptd on its own reads.
// Folders are signed in-process (tests/testing/signing_fixture.h); the
// interop with the reference, model_signing, is python/tests/test_signing.py.
#include "ptd/model_signature.h"

#include <openssl/obj_mac.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "ptd/file_source.h"
#include "ptd/host_device.h"
#include "ptd/loader.h"
#include "ptd/ptd_writer.h"
#include "ptd/report.h"
#include "ptd/rules.h"
#include "runtime/signing/file_hasher.h"
#include "tests/testing/signing_fixture.h"
#include "tests/testing/test_util.h"

namespace ptd {
namespace {

namespace fs = std::filesystem;
using ::ptd::testing::DataPath;
using ::ptd::testing::KeyBundle;
using ::ptd::testing::ReadFileBytes;
using ::ptd::testing::SignFolder;
using ::ptd::testing::SignSpec;
using ::ptd::testing::StatementFor;
using ::ptd::testing::TempDir;
using ::ptd::testing::TestKey;
using ::ptd::testing::WriteFile;
using ::ptd::testing::WriteFileBytes;
using ::testing::EndsWith;
using ::testing::HasSubstr;

// The rule `st` carries, or a description of a Status that names none.
std::string RuleName(const absl::Status& st) {
  return ::ptd::RuleOf(st).value_or("(none: " + std::string(st.message()) + ")");
}

// A model folder (the mlp program's .pte and .ptd) and, outside it, the key.
class SignedFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = (fs::path(dir_.path()) / "model").string();
    fs::create_directories(model_);
    fs::copy_file(DataPath("executorch/mlp.ptd"), Ptd());
    fs::copy_file(DataPath("executorch/mlp.pte"), Pte());
    WriteFile(keys_.File("key.pub"), key_.public_pem);
  }
  std::string Ptd() const { return model_ + "/mlp.ptd"; }
  std::string Pte() const { return model_ + "/mlp.pte"; }
  std::string Sig() const { return model_ + "/model.sig"; }
  SignatureOptions Options() const {
    return SignatureOptions{.signature = Sig(),
                            .public_key = keys_.File("key.pub"),
                            .certificate_chain = "",
                            .model_dir = ""};
  }
  absl::Status Verify(SignatureReport* report = nullptr) const {
    const std::string paths[] = {Ptd(), Pte()};
    return VerifySignedModel(Options(), paths, 2, report);
  }
  absl::StatusOr<LoadedWeights> Load(size_t threads = 2, IoMode io = IoMode::kAuto) const {
    LoadOptions o{.threads = threads, .io = io, .signature = Options()};
    return LoadWeights(BundlePaths{.ptd = Ptd(), .pte = Pte()}, std::make_shared<HostDevice>(), o);
  }
  // Rewrites the signature from `statement` (signed by the right key).
  void Resign(const nlohmann::json& statement) const {
    WriteFile(Sig(), KeyBundle(key_, statement.dump()));
  }
  void FlipByte(uint64_t offset) const {
    std::vector<uint8_t> b = ReadFileBytes(Ptd());
    ASSERT_LT(offset, b.size());
    b[offset] ^= 0x01;
    WriteFileBytes(Ptd(), b);
  }
  // An offset inside the first weight's stored bytes.
  uint64_t WeightByte() const {
    auto c = Container::Open(*OpenPreadFile(Ptd()));
    EXPECT_TRUE(c.ok());
    const NamedDataEntry& e = (*c)->named_data().front();
    return (*c)->SegmentFileOffset(e.segment_index) + 7;
  }

  TempDir dir_, keys_;
  std::string model_;
  TestKey key_ = TestKey::Make();
};

class SignedLoadTest : public SignedFolderTest,
                       public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {
};

TEST_P(SignedLoadTest, VerifiesAndLoadsTheSameBytesAsUnsigned) {
  const auto [method, hash] = GetParam();
  SignFolder(model_, key_, SignSpec{.method = method, .hash = hash, .shard_size = 1024});
  SignatureReport vr;
  ASSERT_TRUE(Verify(&vr).ok()) << vr.error.value_or("");
  EXPECT_TRUE(vr.verified);
  EXPECT_EQ(vr.method, "key");
  EXPECT_EQ(vr.serialization, method);
  EXPECT_EQ(vr.hash, hash);
  ASSERT_EQ(vr.files.size(), 2u);
  for (const auto& f : vr.files) EXPECT_EQ(f.read, "apart");

  auto w = Load();
  ASSERT_TRUE(w.ok()) << w.status();
  const SignatureReport& r = w->stats().signature;
  EXPECT_TRUE(r.checked);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(r.one_pass);
  for (const auto& f : r.files) {
    EXPECT_TRUE(f.ok) << f.name;
    EXPECT_EQ(f.read, f.name == "mlp.ptd" ? "load" : "apart") << f.name;
  }
  auto plain = LoadWeights(BundlePaths{.ptd = Ptd(), .pte = Pte()}, std::make_shared<HostDevice>());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->stats().signature.checked);
  ASSERT_EQ(w->storages().size(), plain->storages().size());
  for (size_t i = 0; i < w->storages().size(); ++i) {
    EXPECT_EQ(*DigestLoadedStorage(*w, w->storages()[i]),
              *DigestLoadedStorage(*plain, plain->storages()[i]));
  }
}

TEST_P(SignedLoadTest, OneChangedWeightByteIsA5NamingTheFileAndShard) {
  const auto [method, hash] = GetParam();
  SignFolder(model_, key_, SignSpec{.method = method, .hash = hash, .shard_size = 1024});
  const uint64_t at = WeightByte();
  FlipByte(at);
  // The geometry still holds: only the signature sees it.
  EXPECT_TRUE(
      LoadWeights(BundlePaths{.ptd = Ptd(), .pte = Pte()}, std::make_shared<HostDevice>()).ok());
  for (const absl::Status& st : {Verify(), Load().status()}) {
    EXPECT_EQ(RuleName(st), "A5");
    EXPECT_THAT(std::string(st.message()), HasSubstr("mlp.ptd"));
    if (method == "shards") {
      const uint64_t start = at / 1024 * 1024;
      EXPECT_THAT(std::string(st.message()), HasSubstr(absl::StrCat(start, ":")));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MethodsAndHashes, SignedLoadTest,
                         ::testing::Combine(::testing::Values("files", "shards"),
                                            ::testing::Values("sha256", "blake2b")));

TEST_F(SignedFolderTest, P384KeyVerifies) {
  key_ = TestKey::Make(NID_secp384r1);
  WriteFile(keys_.File("key.pub"), key_.public_pem);
  SignFolder(model_, key_, SignSpec{});
  EXPECT_TRUE(Verify().ok());
}

TEST_F(SignedFolderTest, WrongKeyOrHintOrSignatureIsA2) {
  SignFolder(model_, key_, SignSpec{});
  const TestKey other = TestKey::Make();
  WriteFile(keys_.File("key.pub"), other.public_pem);
  EXPECT_EQ(RuleName(Verify()), "A2");  // The hint names another key.
  // No hint: the signature itself does not verify.
  auto bundle = nlohmann::json::parse(testing::ReadFile(Sig()));
  bundle["verificationMaterial"]["publicKey"]["hint"] = "";
  WriteFile(Sig(), bundle.dump());
  EXPECT_EQ(RuleName(Verify()), "A2");
  EXPECT_EQ(RuleName(Load().status()), "A2");
}

TEST_F(SignedFolderTest, BrokenSignatureFilesAreA1) {
  SignFolder(model_, key_, SignSpec{});
  const std::string good = testing::ReadFile(Sig());
  auto with = [&](auto edit) {
    auto b = nlohmann::json::parse(good);
    edit(b);
    return b.dump();
  };
  const std::vector<std::string> bad = {
      good.substr(0, good.size() / 2),
      std::string("\x00\xff garbage", 10),
      "[]",
      "{}",
      with([](nlohmann::json& b) { b["dsseEnvelope"]["payload"] = "***"; }),
      with([](nlohmann::json& b) { b["dsseEnvelope"]["signatures"] = nlohmann::json::array(); }),
      with([](nlohmann::json& b) { b["dsseEnvelope"]["payloadType"] = "text/plain"; }),
      with([](nlohmann::json& b) { b.erase("verificationMaterial"); }),
  };
  for (const std::string& text : bad) {
    WriteFile(Sig(), text);
    const absl::Status st = Verify();
    EXPECT_EQ(RuleName(st), "A1") << text.substr(0, 80);
    EXPECT_THAT(std::string(st.message()), HasSubstr("model.sig"));
  }
}

TEST_F(SignedFolderTest, BrokenStatementsAreA3) {
  const nlohmann::json good = StatementFor(model_, SignSpec{.method = "shards"});
  std::vector<nlohmann::json> bad(7, good);
  bad[0]["subject"][0]["digest"]["sha256"] = std::string(64, '0');
  bad[1]["predicateType"] = "https://example.com/other";
  bad[2]["predicate"]["serialization"]["method"] = "layers";
  bad[3]["predicate"]["serialization"]["hash_type"] = "md5";
  bad[4]["predicate"]["resources"][0]["name"] = "../escape:0:1024";
  bad[5]["predicate"]["serialization"]["shard_size"] = 0.5;
  bad[6]["predicate"]["resources"][0]["digest"] = "zz";
  for (size_t i = 0; i < bad.size(); ++i) {
    if (i != 0) testing::ResetSubjectDigest(&bad[i]);
    Resign(bad[i]);
    EXPECT_EQ(RuleName(Verify()), "A3") << i;
  }
}

TEST_F(SignedFolderTest, UnverifiableMethodsAndHashesAreA7) {
  nlohmann::json st = StatementFor(model_, SignSpec{});
  st["predicate"]["serialization"]["hash_type"] = "blake3";
  Resign(st);
  absl::Status s = Verify();
  EXPECT_EQ(RuleName(s), "A7");
  EXPECT_THAT(std::string(s.message()), HasSubstr("model_signing verify"));
  SignFolder(model_, key_, SignSpec{});
  auto b = nlohmann::json::parse(testing::ReadFile(Sig()));
  b["verificationMaterial"]["tlogEntries"] = nlohmann::json::array({{{"logIndex", "1"}}});
  WriteFile(Sig(), b.dump());
  s = Verify();
  EXPECT_EQ(RuleName(s), "A7");
  EXPECT_THAT(std::string(s.message()), HasSubstr("sigstore"));
}

TEST_F(SignedFolderTest, FolderMismatchesAreA4AndA6) {
  SignFolder(model_, key_, SignSpec{.method = "shards"});
  WriteFile(model_ + "/extra.bin", "x");
  absl::Status st = Verify();
  EXPECT_EQ(RuleName(st), "A6");
  EXPECT_THAT(std::string(st.message()), HasSubstr("extra.bin"));
  EXPECT_EQ(RuleName(Load().status()), "A6");
  fs::remove(model_ + "/extra.bin");
  // An empty file has no shards: the reference lists nothing, and accepts.
  WriteFile(model_ + "/empty", "");
  EXPECT_TRUE(Verify().ok());
  fs::remove(model_ + "/empty");
  fs::create_symlink(Pte(), model_ + "/link.pte");
  EXPECT_EQ(RuleName(Verify()), "A6");
  fs::remove(model_ + "/link.pte");

  // A listed file gone, or grown past its shards: A4.
  const std::string pte = testing::ReadFile(Pte());
  fs::remove(Pte());
  const std::string just_ptd[] = {Ptd()};
  EXPECT_EQ(RuleName(VerifySignedModel(Options(), just_ptd, 1, nullptr)), "A4");
  WriteFile(Pte(), pte + "more");
  EXPECT_EQ(RuleName(Verify()), "A4");
  WriteFile(Pte(), pte);
  EXPECT_TRUE(Verify().ok());

  // The .ptd read but not signed (ignored): A4.
  SignFolder(model_, key_, SignSpec{.ignore_paths = {"model.sig", "mlp.ptd"}});
  st = Verify();
  EXPECT_EQ(RuleName(st), "A4");
  EXPECT_THAT(std::string(st.message()), HasSubstr("mlp.ptd"));
}

TEST_F(SignedFolderTest, AnotherFoldersSignatureIsRefused) {
  TempDir other;
  WriteFile(other.File("mlp.ptd"), "not these bytes");
  WriteFile(other.File("mlp.pte"), "nor these");
  SignFolder(other.path(), key_, SignSpec{});
  fs::copy_file(other.File("model.sig"), Sig());
  const std::string rule = RuleName(Verify());
  EXPECT_TRUE(rule == "A5" || rule == "A4") << rule;
}

TEST_F(SignedFolderTest, TrustMaterialIsRequired) {
  SignFolder(model_, key_, SignSpec{});
  SignatureOptions o = Options();
  o.public_key.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(ModelSignature::Open(o, model_).status()));
  o = Options();
  o.certificate_chain = o.public_key;
  EXPECT_TRUE(absl::IsInvalidArgument(ModelSignature::Open(o, model_).status()));
}

// Every shard of the .ptd changed, hashed apart on 8 threads: the error, and
// the file's own in the report, name its first shard on every run, whichever
// thread finds a bad shard first (the report named the first found, which
// made the CLI's and Python's reports of one folder differ).
TEST_F(SignedFolderTest, EachFileReportsItsFirstBadShardWhicheverThreadFindsOne) {
  fs::remove(Ptd());
  fs::remove(Pte());
  PtdWriter w;
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(
        w.Add("k" + std::to_string(i), std::vector<uint8_t>(65536, static_cast<uint8_t>(i)), 64)
            .ok());
  }
  ASSERT_TRUE(w.Write(Ptd()).ok());
  SignFolder(model_, key_, SignSpec{.method = "shards", .hash = "blake2b", .shard_size = 4096});
  std::vector<uint8_t> b = ReadFileBytes(Ptd());
  for (size_t at = 0; at < b.size(); at += 4096) b[at] ^= 0x01;
  WriteFileBytes(Ptd(), b);
  const std::string paths[] = {Ptd()};
  for (int run = 0; run < 20; ++run) {
    SignatureReport r;
    const absl::Status st = VerifySignedModel(Options(), paths, 8, &r);
    ASSERT_EQ(RuleName(st), "A5");
    EXPECT_THAT(std::string(st.message()), HasSubstr("bytes 0:4096 "));
    const auto f = std::find_if(r.files.begin(), r.files.end(),
                                [](const SignatureReport::File& x) { return x.name == "mlp.ptd"; });
    ASSERT_NE(f, r.files.end());
    EXPECT_FALSE(f->ok);
    EXPECT_EQ(f->error, std::string(st.message())) << "run " << run;
  }
}

// A larger .ptd in many storages, read by several threads: each shard hashed
// in order on the thread that reads it; a changed byte names its shard.
class SignedManyStoragesTest : public SignedFolderTest,
                               public ::testing::WithParamInterface<IoMode> {
 protected:
  void SetUp() override {
    SignedFolderTest::SetUp();
    fs::remove(Ptd());
    PtdWriter w;
    for (int i = 0; i < 48; ++i) {
      std::vector<uint8_t> bytes(40000 + i * 13);
      for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 31 + i);
      ASSERT_TRUE(w.Add("k" + std::to_string(i), bytes, 64).ok());
    }
    ASSERT_TRUE(w.Write(Ptd()).ok());
    fs::remove(Pte());
  }
  absl::StatusOr<LoadedWeights> LoadPtd(size_t threads) const {
    LoadOptions o{.threads = threads, .io = GetParam(), .signature = Options()};
    return LoadWeights(BundlePaths{.ptd = Ptd()}, std::make_shared<HostDevice>(), o);
  }
};

TEST_P(SignedManyStoragesTest, ShardsAndFilesOnFourThreads) {
  for (const std::string method : {"shards", "files"}) {
    SignFolder(model_, key_, SignSpec{.method = method, .hash = "blake2b", .shard_size = 65536});
    auto w = LoadPtd(4);
    ASSERT_TRUE(w.ok()) << method << ": " << w.status();
    EXPECT_TRUE(w->stats().signature.verified);
    EXPECT_TRUE(w->stats().signature.one_pass);
    EXPECT_EQ(w->storages().size(), 48u);
  }
  const uint64_t size = fs::file_size(Ptd());
  const uint64_t at = size / 2 + 3;
  SignFolder(model_, key_, SignSpec{.method = "shards", .shard_size = 65536});
  FlipByte(at);
  const absl::Status st = LoadPtd(4).status();
  EXPECT_EQ(RuleName(st), "A5");
  const uint64_t start = at / 65536 * 65536;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("bytes ", start, ":", std::min(size, start + 65536))));
}

INSTANTIATE_TEST_SUITE_P(Engines, SignedManyStoragesTest,
                         ::testing::Values(IoMode::kBuffered, IoMode::kDirect),
                         [](const ::testing::TestParamInfo<IoMode>& p) {
                           return std::string(IoModeName(p.param));
                         });

// The hasher alone: bytes fed out of order, over its cap of bytes set
// aside, from two threads; and Abort wakes a waiting Feed.
TEST_F(SignedFolderTest, HasherTakesBytesInAnyOrderAndWaitsPastItsCap) {
  SignFolder(model_, key_, SignSpec{.method = "files"});
  auto sig = ModelSignature::Open(Options(), model_);
  ASSERT_TRUE(sig.ok()) << sig.status();
  auto file = OpenPreadFile(Ptd());
  ASSERT_TRUE(file.ok());
  const std::vector<uint8_t> bytes = ReadFileBytes(Ptd());
  const uint64_t n = bytes.size(), half = n / 2;
  {
    internal::SignedFileHasher h(*sig, *sig->Find("mlp.ptd"), **file, /*max_pending=*/16);
    h.ExpectReads({{0, half}, {half, n}});
    // The second half first: over the cap, it waits for the first.
    std::thread late([&] { EXPECT_TRUE(h.Feed(half, bytes.data() + half, n - half).ok()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(h.Feed(0, bytes.data(), half).ok());
    late.join();
    EXPECT_TRUE(h.Finish(2).ok());
  }
  {
    internal::SignedFileHasher h(*sig, *sig->Find("mlp.ptd"), **file, /*max_pending=*/16);
    h.ExpectReads({{0, half}, {half, n}});
    std::thread late(
        [&] { EXPECT_TRUE(absl::IsCancelled(h.Feed(half, bytes.data() + half, n - half))); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    h.Abort();
    late.join();
  }
  {
    // Nothing fed: the hasher reads the file itself.
    internal::SignedFileHasher h(*sig, *sig->Find("mlp.ptd"), **file);
    EXPECT_TRUE(h.Finish(1).ok());
  }
}

}  // namespace
}  // namespace ptd
