// Fuzz target: ModelSignature::Parse (docs/SPEC.md section 8) over
// arbitrary bytes, two ways by the first byte:
//   even: the rest is the signature file itself (A1, and A2 with a fixed
//         key: random bytes reach the envelope checks, rarely further);
//   odd:  the rest is the in-toto payload, which this target signs with the
//         fixed key and wraps in a valid envelope, so that the statement
//         parser (A3, A7) sees every input.
//
// Invariants (a violation traps): a parsed signature's files are sorted and
// unique, each has shards back to back from 0 ("files": one, to the end),
// every digest has the hash's size, and a "shards" signature has a shard
// size and every shard at most that long.
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "ptd/model_signature.h"
#include "ptd/rules.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// A throwaway P-256 key pair, for this target only.
constexpr std::string_view kPrivatePem =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgCOYh6LkG3RCo2Udi\n"
    "sLJ2+JkxpWXzuEDqxrUNmVEcGK2hRANCAARx3Jf3DKuQpmVTTW1HPYPT1rGT1yFS\n"
    "PpjN9NlDFLj1AMncsPpqVka4VQcfcN8PS1WBLeG0644PtOCcKe6lnrTN\n"
    "-----END PRIVATE KEY-----\n";
constexpr std::string_view kPublicPem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEcdyX9wyrkKZlU01tRz2D09axk9ch\n"
    "Uj6YzfTZQxS49QDJ3LD6alZGuFUHH3DfD0tVgS3htOuOD7TgnCnupZ60zQ==\n"
    "-----END PUBLIC KEY-----\n";

std::string Sign(std::string_view message) {
  static EVP_PKEY* key = [] {
    BIO* bio = BIO_new_mem_buf(kPrivatePem.data(), static_cast<int>(kPrivatePem.size()));
    EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    return k;
  }();
  FUZZ_CHECK(key != nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  FUZZ_CHECK(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1);
  size_t n = 0;
  const auto* m = reinterpret_cast<const unsigned char*>(message.data());
  FUZZ_CHECK(EVP_DigestSign(ctx, nullptr, &n, m, message.size()) == 1);
  std::string sig(n, '\0');
  FUZZ_CHECK(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n, m,
                            message.size()) == 1);
  sig.resize(n);
  EVP_MD_CTX_free(ctx);
  return sig;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptd;
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string bundle = rest;
  if (data[0] % 2 == 1) {
    const std::string type = "application/vnd.in-toto+json";
    const std::string pae =
        absl::StrCat("DSSEv1 ", type.size(), " ", type, " ", rest.size(), " ", rest);
    bundle = absl::StrCat(R"({"verificationMaterial":{"publicKey":{"hint":""},"tlogEntries":[]},)",
                          R"("dsseEnvelope":{"payloadType":")", type, R"(","payload":")",
                          absl::Base64Escape(rest), R"(","signatures":[{"sig":")",
                          absl::Base64Escape(Sign(pae)), R"(","keyid":""}]}})");
  }
  const ModelSignature::Trust trust{.public_key_pem = std::string(kPublicPem),
                                    .certificate_chain_pem = ""};
  absl::StatusOr<ModelSignature> sig = ModelSignature::Parse(bundle, trust, "fuzz.sig", "/nowhere");
  if (!sig.ok()) {
    // Every refusal names its rule.
    FUZZ_CHECK(RuleOf(sig.status()).has_value());
    return 0;
  }
  FUZZ_CHECK(sig->sharded() == (sig->serialization() == "shards"));
  for (size_t i = 0; i < sig->files().size(); ++i) {
    const SignedFile& f = sig->files()[i];
    if (i > 0) FUZZ_CHECK(sig->files()[i - 1].name < f.name);
    FUZZ_CHECK(!f.shards.empty());
    FUZZ_CHECK(sig->Find(f.name) == &f);
    uint64_t at = 0;
    for (const SignedFile::Shard& s : f.shards) {
      FUZZ_CHECK(s.digest.size() == sig->digest_size());
      FUZZ_CHECK(s.start == at && s.end > s.start);
      if (sig->sharded()) FUZZ_CHECK(s.end - s.start <= sig->shard_size());
      at = s.end;
    }
    if (!sig->sharded())
      FUZZ_CHECK(f.shards.size() == 1 && f.shards[0].end == SignedFile::kWholeFile);
  }
  return 0;
}
