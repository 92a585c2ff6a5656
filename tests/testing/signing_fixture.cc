#include "tests/testing/signing_fixture.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "ptd/model_signature.h"

namespace ptd::testing {

namespace fs = std::filesystem;

namespace {

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);  // NOLINT(runtime/int)
  return std::string(data, static_cast<size_t>(n));
}

EVP_PKEY* ReadPrivate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (k == nullptr) throw std::runtime_error("bad private key");
  return k;
}

std::string Raw(std::string_view hash, const std::string& bytes) {
  SignatureDigest d(hash == "blake2b" ? SignatureHash::kBlake2b : SignatureHash::kSha256);
  d.Update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return d.Finish();
}

}  // namespace

TestKey TestKey::Make(int curve_nid) {
  const int nid = curve_nid == 0 ? NID_X9_62_prime256v1 : curve_nid;
  EVP_PKEY* key = EVP_EC_gen(OBJ_nid2sn(nid));
  if (key == nullptr) throw std::runtime_error("EVP_EC_gen");
  TestKey k;
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  k.private_pem = BioText(bio);
  BIO_free(bio);
  bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, key);
  k.public_pem = BioText(bio);
  BIO_free(bio);
  EVP_PKEY_free(key);
  return k;
}

std::string TestKey::Sign(std::string_view data) const {
  EVP_PKEY* key = ReadPrivate(private_pem);
  const int bits = EVP_PKEY_get_bits(key);
  const EVP_MD* md = bits <= 256 ? EVP_sha256() : bits <= 384 ? EVP_sha384() : EVP_sha512();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestSignInit(ctx, nullptr, md, nullptr, key);
  size_t n = 0;
  EVP_DigestSign(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(data.data()),
                 data.size());
  std::string sig(n, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n,
                 reinterpret_cast<const unsigned char*>(data.data()), data.size());
  sig.resize(n);
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return sig;
}

std::string TestKey::Hint() const { return absl::BytesToHexString(Raw("sha256", public_pem)); }

nlohmann::json StatementFor(const std::string& dir, const SignSpec& spec) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    bool ignored = false;
    for (const std::string& p : spec.ignore_paths) {
      ignored |= rel == p || rel.rfind(p + "/", 0) == 0;
    }
    if (!ignored) names.push_back(rel);
  }
  std::sort(names.begin(), names.end());
  nlohmann::json resources = nlohmann::json::array();
  for (const std::string& name : names) {
    const std::string bytes = ReadFile((fs::path(dir) / name).string());
    if (spec.method == "files") {
      resources.push_back({{"name", name},
                           {"algorithm", spec.hash},
                           {"digest", absl::BytesToHexString(Raw(spec.hash, bytes))}});
      continue;
    }
    for (uint64_t start = 0; start < bytes.size(); start += spec.shard_size) {
      const uint64_t end = std::min<uint64_t>(bytes.size(), start + spec.shard_size);
      resources.push_back(
          {{"name", absl::StrCat(name, ":", start, ":", end)},
           {"algorithm", absl::StrCat(spec.hash, "-sharded-", spec.shard_size)},
           {"digest", absl::BytesToHexString(Raw(spec.hash, bytes.substr(start, end - start)))}});
    }
  }
  nlohmann::json serialization{{"method", spec.method},
                               {"hash_type", spec.hash},
                               {"allow_symlinks", false},
                               {"ignore_paths", spec.ignore_paths}};
  if (spec.method == "shards") serialization["shard_size"] = static_cast<double>(spec.shard_size);
  nlohmann::json st{
      {"_type", "https://in-toto.io/Statement/v1"},
      {"subject", {{{"name", fs::path(dir).filename().string()}, {"digest", {{"sha256", ""}}}}}},
      {"predicateType", "https://model_signing/signature/v1.0"},
      {"predicate", {{"serialization", serialization}, {"resources", resources}}}};
  ResetSubjectDigest(&st);
  return st;
}

void ResetSubjectDigest(nlohmann::json* st) {
  std::string all;
  for (const auto& r : (*st)["predicate"]["resources"]) {
    all += absl::HexStringToBytes(r["digest"].get<std::string>());
  }
  (*st)["subject"][0]["digest"]["sha256"] = absl::BytesToHexString(Raw("sha256", all));
}

std::string KeyBundle(const TestKey& key, std::string_view payload) {
  const std::string type = "application/vnd.in-toto+json";
  const std::string pae = absl::StrCat("DSSEv1 ", type.size(), " ", type, " ", payload.size(), " ",
                                       absl::string_view(payload.data(), payload.size()));
  nlohmann::json bundle{
      {"mediaType", "application/vnd.dev.sigstore.bundle.v0.3+json"},
      {"verificationMaterial",
       {{"publicKey", {{"hint", key.Hint()}}}, {"tlogEntries", nlohmann::json::array()}}},
      {"dsseEnvelope",
       {{"payload", absl::Base64Escape(absl::string_view(payload.data(), payload.size()))},
        {"payloadType", type},
        {"signatures", {{{"sig", absl::Base64Escape(key.Sign(pae))}, {"keyid", ""}}}}}}};
  return bundle.dump();
}

std::string SignFolder(const std::string& dir, const TestKey& key, const SignSpec& spec) {
  const std::string bundle = KeyBundle(key, StatementFor(dir, spec).dump());
  WriteFile((fs::path(dir) / "model.sig").string(), bundle);
  return bundle;
}

void WriteFile(const std::string& path, std::string_view text) {
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

}  // namespace ptd::testing
