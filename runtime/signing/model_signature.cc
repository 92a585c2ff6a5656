// ModelSignature: the Sigstore bundle of OpenSSF model signing, read and
// checked against the user's trust material (docs/SPEC.md section 8).
//
// What the reference (model_signing 1.1.1) does, and this follows:
// - only the envelope's first signature is checked;
// - key method: the bundle's publicKey.hint, when present, is the hex
//   SHA-256 of the user's key as PEM SubjectPublicKeyInfo text; an empty
//   hint is accepted (older signatures), a different one is refused;
// - certificate method: the bundle's first certificate is the signing one,
//   the rest untrusted intermediates; the chain is checked against the
//   user's certificates at the signing certificate's notBefore time, and the
//   signing certificate must allow digitalSignature (KeyUsage) or code
//   signing (ExtendedKeyUsage);
// - ECDSA with SHA-256, -384 or -512 by the key's curve (P-256, P-384,
//   P-521);
// - the subject digest is SHA-256 over the resources' raw digests in the
//   order the payload lists them.
// Not followed: the reference's fallback for signatures of its 0.x releases
// (a PAE with extra escapes, and the v0.2 predicate): those are A7 here.
#include "ptd/model_signature.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "ptd/rules.h"
#include "runtime/internal/check.h"
#include "runtime/internal/status_macros.h"
#include "runtime/internal/strings.h"

namespace ptd {

using internal::Sv;
using json = nlohmann::json;

namespace {

constexpr std::string_view kPayloadType = "application/vnd.in-toto+json";
constexpr std::string_view kStatementType = "https://in-toto.io/Statement/v1";
constexpr std::string_view kPredicateType = "https://model_signing/signature/v1.0";
constexpr std::string_view kPredicateTypeV02 = "https://model_signing/Digests/v0.1";
// A signature file larger than this is not one (A1): the reference's hold
// a digest per file or shard, tens of bytes each.
constexpr uint64_t kMaxSignatureBytes = uint64_t{256} << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// The message of a rule error: "SIG: WHAT (RULE)".
absl::Status RuleError(std::string_view name, std::string_view rule, std::string_view what) {
  return ptd::RuleError(absl::StatusCode::kDataLoss, rule, absl::StrCat(Sv(name), ": ", Sv(what)));
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type.
  ERR_clear_error();
  if (e == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, std::string_view what,
                                          uint64_t limit) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    const absl::Status st =
        ec == std::errc::no_such_file_or_directory
            ? absl::NotFoundError("")
            : (ec == std::errc::permission_denied ? absl::PermissionDeniedError("")
                                                  : absl::UnavailableError(""));
    return absl::Status(st.code(),
                        absl::StrCat(path, ": cannot read the ", Sv(what), ": ", ec.message()));
  }
  if (size > limit) {
    return ptd::RuleError(absl::StatusCode::kDataLoss, "A1",
                          absl::StrCat(path, ": the ", Sv(what), " is ", size, " bytes, over the ",
                                       limit, " this reads"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat(path, ": cannot open the ", Sv(what)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat(path, ": cannot read the ", Sv(what)));
  return std::move(ss).str();
}

// A string member, or nullptr.
const std::string* StringAt(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

std::optional<std::string> Base64(const std::string& text) {
  std::string out;
  if (!absl::Base64Unescape(text, &out)) return std::nullopt;
  return out;
}

// The hash ECDSA uses with `key`'s curve, as the reference picks it; null
// for a key that is not EC on P-256, P-384 or P-521.
const EVP_MD* HashForKey(EVP_PKEY* key, std::string* curve_name) {
  if (EVP_PKEY_base_id(key) != EVP_PKEY_EC) return nullptr;
  char name[64] = {0};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(key, "group", name, sizeof(name), &len) != 1) return nullptr;
  *curve_name = name;
  const int nid = OBJ_sn2nid(name);
  const int nid2 = nid == NID_undef ? EC_curve_nist2nid(name) : nid;
  switch (nid2) {
    case NID_X9_62_prime256v1:
      return EVP_sha256();
    case NID_secp384r1:
      return EVP_sha384();
    case NID_secp521r1:
      return EVP_sha512();
    default:
      return nullptr;
  }
}

// DSSE's pre-authentication encoding.
std::string Pae(std::string_view type, std::string_view payload) {
  return absl::StrCat("DSSEv1 ", type.size(), " ", Sv(type), " ", payload.size(), " ", Sv(payload));
}

bool VerifyEcdsa(EVP_PKEY* key, const EVP_MD* md, std::string_view message, std::string_view sig) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return false;
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, key) != 1) {
    ERR_clear_error();
    return false;
  }
  const int rc =
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size());
  ERR_clear_error();
  return rc == 1;
}

absl::StatusOr<Pkey> ReadPublicKey(const std::string& pem, std::string_view name) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return absl::ResourceExhaustedError("BIO_new_mem_buf");
  Pkey key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(name), ": not a PEM public key (SubjectPublicKeyInfo): ", OpenSslError()));
  }
  return key;
}

// The hex SHA-256 of `key` as PEM SubjectPublicKeyInfo text: the key hint
// the reference writes.
std::string KeyHint(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PTD_CHECK(bio != nullptr);
  PTD_CHECK(PEM_write_bio_PUBKEY(bio.get(), key) == 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  SignatureDigest d(SignatureHash::kSha256);
  d.Update(reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(n));
  return absl::BytesToHexString(d.Finish());
}

// The certificate method: the signing certificate of `chain` (DER, signing
// first) checked against `trusted_pem`; its public key.
absl::StatusOr<Pkey> CheckCertificates(const json& chain, const std::string& trusted_pem,
                                       std::string_view name) {
  const auto a1 = [&](std::string_view what) { return RuleError(name, "A1", what); };
  const auto a2 = [&](std::string_view what) { return RuleError(name, "A2", what); };
  const auto certs = chain.find("certificates");
  if (certs == chain.end() || !certs->is_array() || certs->empty()) {
    return a1("verificationMaterial.x509CertificateChain has no certificates");
  }
  std::vector<std::unique_ptr<X509, X509Free>> parsed;
  for (size_t i = 0; i < certs->size(); ++i) {
    const std::string* raw = StringAt((*certs)[i], "rawBytes");
    std::optional<std::string> der = raw ? Base64(*raw) : std::nullopt;
    if (!der) return a1(absl::StrCat("certificate ", i, " has no base64 rawBytes"));
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der->data());
    std::unique_ptr<X509, X509Free> x(d2i_X509(nullptr, &p, static_cast<long>(der->size())));
    if (x == nullptr || p != reinterpret_cast<const unsigned char*>(der->data()) + der->size()) {
      ERR_clear_error();
      return a1(absl::StrCat("certificate ", i, " is not one DER certificate"));
    }
    parsed.push_back(std::move(x));
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  PTD_CHECK(store != nullptr);
  {
    std::unique_ptr<BIO, BioFree> bio(
        BIO_new_mem_buf(trusted_pem.data(), static_cast<int>(trusted_pem.size())));
    PTD_CHECK(bio != nullptr);
    int added = 0;
    for (;;) {
      std::unique_ptr<X509, X509Free> x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
      if (x == nullptr) break;
      if (X509_STORE_add_cert(store.get(), x.get()) == 1) ++added;
    }
    ERR_clear_error();
    if (added == 0) {
      return absl::InvalidArgumentError("the certificate chain file holds no PEM certificate");
    }
  }
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  PTD_CHECK(untrusted != nullptr);
  for (size_t i = 1; i < parsed.size(); ++i) {
    PTD_CHECK(sk_X509_push(untrusted.get(), X509_dup(parsed[i].get())) > 0);
  }
  X509* leaf = parsed[0].get();
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  PTD_CHECK(ctx != nullptr);
  PTD_CHECK(X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) == 1);
  // At the signing certificate's notBefore, as the reference checks it.
  const ASN1_TIME* not_before = X509_get0_notBefore(leaf);
  struct tm tm_nb {};
  if (not_before == nullptr || ASN1_TIME_to_tm(not_before, &tm_nb) != 1) {
    return a1("the signing certificate has no readable notBefore time");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, timegm(&tm_nb));
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return a2(absl::StrCat("the signing certificate does not chain to the trusted certificates: ",
                           X509_verify_cert_error_string(err)));
  }
  const uint32_t flags = X509_get_extension_flags(leaf);
  bool can_sign = (flags & EXFLAG_KUSAGE) != 0 && (X509_get_key_usage(leaf) & KU_DIGITAL_SIGNATURE);
  if (!can_sign && (flags & EXFLAG_XKUSAGE) != 0) {
    can_sign = (X509_get_extended_key_usage(leaf) & XKU_CODE_SIGN) != 0;
  }
  if (!can_sign) {
    return a2(
        "the signing certificate allows neither digitalSignature (KeyUsage) nor code signing "
        "(ExtendedKeyUsage)");
  }
  Pkey key(X509_get_pubkey(leaf));
  if (key == nullptr) return a1("the signing certificate's public key does not decode");
  return key;
}

bool SafeName(std::string_view name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string_view SignatureHashName(SignatureHash hash) {
  return hash == SignatureHash::kSha256 ? "sha256" : "blake2b";
}

std::string SignedModelDir(const SignatureOptions& options, std::string_view ptd_path) {
  if (!options.model_dir.empty()) return options.model_dir;
  std::filesystem::path p{std::string(ptd_path)};
  std::filesystem::path dir = p.parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

std::optional<uint64_t> SignedFile::size() const {
  if (shards.empty() || shards.back().end == kWholeFile) return std::nullopt;
  return shards.back().end;
}

// ---- SignatureDigest ----

SignatureDigest::SignatureDigest(SignatureHash hash) {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  PTD_CHECK(c != nullptr);
  PTD_CHECK(EVP_DigestInit_ex(c, hash == SignatureHash::kSha256 ? EVP_sha256() : EVP_blake2b512(),
                              nullptr) == 1);
  ctx_ = c;
}
SignatureDigest::~SignatureDigest() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
SignatureDigest::SignatureDigest(SignatureDigest&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)) {}
SignatureDigest& SignatureDigest::operator=(SignatureDigest&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}
void SignatureDigest::Update(const uint8_t* data, size_t n) {
  if (n == 0) return;
  PTD_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1);
}
std::string SignatureDigest::Finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  PTD_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out, &len) == 1);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// ---- ModelSignature ----

absl::StatusOr<ModelSignature> ModelSignature::Open(const SignatureOptions& options,
                                                    std::string model_dir) {
  if (options.public_key.empty() == options.certificate_chain.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.signature, ": a signature is checked with a public key (--public-key) or a ",
        "certificate chain (--certificate-chain): give exactly one"));
  }
  absl::StatusOr<std::string> bundle =
      ReadSmallFile(options.signature, "signature file", kMaxSignatureBytes);
  if (!bundle.ok()) return bundle.status();
  Trust trust;
  const std::string& trust_path =
      options.public_key.empty() ? options.certificate_chain : options.public_key;
  absl::StatusOr<std::string> pem = ReadSmallFile(
      trust_path, options.public_key.empty() ? "certificate chain" : "public key", 16 << 20);
  if (!pem.ok()) return pem.status();
  (options.public_key.empty() ? trust.certificate_chain_pem : trust.public_key_pem) =
      *std::move(pem);
  return Parse(*bundle, trust, options.signature, std::move(model_dir));
}

namespace {

// A maker of `rule`'s errors about the signature `name`.
auto RuleFor(const std::string& name, std::string_view rule) {
  return [&name, rule](std::string_view what) { return RuleError(name, rule, what); };
}

// The DSSE envelope of a Sigstore bundle, and the verification material it
// carries: a public key's hint or a certificate chain (A1, A7).
struct Envelope {
  std::string payload_type;
  std::string payload;
  std::string sig;
  const json* public_key = nullptr;  // verificationMaterial.publicKey.
  const json* chain = nullptr;       // verificationMaterial.x509CertificateChain.
};

absl::StatusOr<Envelope> ReadEnvelope(const json& bundle, const std::string& name) {
  const auto a1 = RuleFor(name, "A1");
  const auto a7 = RuleFor(name, "A7");
  const auto env_it = bundle.find("dsseEnvelope");
  if (env_it == bundle.end() || !env_it->is_object()) {
    if (bundle.contains("messageSignature")) {
      return a7(
          "a Sigstore message signature, not a DSSE envelope: verify it with `sigstore verify`");
    }
    return a1("the signature file has no dsseEnvelope object");
  }
  const json& env = *env_it;
  const std::string* payload_type = StringAt(env, "payloadType");
  const std::string* payload_b64 = StringAt(env, "payload");
  if (payload_type == nullptr || payload_b64 == nullptr) {
    return a1("dsseEnvelope lacks a string payloadType or payload");
  }
  std::optional<std::string> payload = Base64(*payload_b64);
  if (!payload) return a1("dsseEnvelope.payload is not base64");
  const auto sigs = env.find("signatures");
  if (sigs == env.end() || !sigs->is_array() || sigs->empty()) {
    return a1("dsseEnvelope has no signatures");
  }
  const std::string* sig_b64 = StringAt((*sigs)[0], "sig");
  std::optional<std::string> sig = sig_b64 ? Base64(*sig_b64) : std::nullopt;
  if (!sig || sig->empty()) return a1("dsseEnvelope.signatures[0].sig is not base64");
  if (*payload_type != kPayloadType) {
    return a1(absl::StrCat("dsseEnvelope.payloadType is '", internal::Escaped(*payload_type),
                           "', not '", Sv(kPayloadType), "'"));
  }
  const auto vm_it = bundle.find("verificationMaterial");
  if (vm_it == bundle.end() || !vm_it->is_object()) {
    return a1("the signature file has no verificationMaterial object");
  }
  const json& vm = *vm_it;
  const auto tlog = vm.find("tlogEntries");
  const bool has_tlog = tlog != vm.end() && tlog->is_array() && !tlog->empty();
  const auto pk = vm.find("publicKey");
  const auto chain = vm.find("x509CertificateChain");
  Envelope e{.payload_type = *payload_type, .payload = *std::move(payload), .sig = *std::move(sig)};
  if (pk != vm.end() && pk->is_object()) e.public_key = &*pk;
  if (chain != vm.end() && chain->is_object()) e.chain = &*chain;
  if (has_tlog || vm.contains("certificate") || (e.public_key == nullptr && e.chain == nullptr)) {
    return a7(
        "signed with Sigstore's keyless method (a transparency-log entry or a Fulcio "
        "certificate), which needs Sigstore's trust root and log: verify it with `model_signing "
        "verify sigstore` (or its Python API), then load with ptd");
  }
  return e;
}

// Checks the envelope's signature with the user's trust material (A2): the
// method that verified, "key" or "certificate".
absl::StatusOr<std::string> CheckEnvelopeSignature(const Envelope& e,
                                                   const ModelSignature::Trust& trust,
                                                   const std::string& name) {
  const auto a2 = RuleFor(name, "A2");
  Pkey key;
  std::string method;
  if (!trust.public_key_pem.empty()) {
    if (e.public_key == nullptr) {
      return a2(
          "signed with a certificate, but a public key was given: check it with "
          "--certificate-chain");
    }
    PTD_ASSIGN_OR_RETURN(key, ReadPublicKey(trust.public_key_pem, "the public key"));
    method = "key";
    const std::string* hint = StringAt(*e.public_key, "hint");
    if (hint != nullptr && !hint->empty()) {
      const std::string want = KeyHint(key.get());
      if (*hint != want) {
        return a2(absl::StrCat("the signature names key ", internal::Escaped(*hint),
                               " (SHA-256 of its PEM), the public key given is ", want));
      }
    }
  } else {
    if (e.chain == nullptr) {
      return a2("signed with a key, but a certificate chain was given: check it with --public-key");
    }
    PTD_ASSIGN_OR_RETURN(key, CheckCertificates(*e.chain, trust.certificate_chain_pem, name));
    method = "certificate";
  }
  const char* signer = method == "key" ? "public key" : "signing certificate";
  std::string curve;
  const EVP_MD* md = HashForKey(key.get(), &curve);
  if (md == nullptr) {
    return a2(absl::StrCat("the ", signer, "'s key is not EC on P-256, P-384 or P-521",
                           curve.empty() ? "" : absl::StrCat(" (", curve, ")")));
  }
  if (!VerifyEcdsa(key.get(), md, Pae(e.payload_type, e.payload), e.sig)) {
    return a2(
        absl::StrCat("the signature does not verify with the ", signer, " (ECDSA, ", curve, ")"));
  }
  return method;
}

// The statement's predicate.serialization (A3, A7).
struct Serialization {
  std::string method;  // "files", "shards".
  SignatureHash hash = SignatureHash::kSha256;
  uint64_t shard_size = 0;  // "shards" only.
  std::vector<std::string> ignore_paths;
  bool allow_symlinks = false;
  size_t digest_size() const { return hash == SignatureHash::kSha256 ? 32 : 64; }
};

// The in-toto statement: its subject's digest, serialization and resources.
struct Statement {
  std::string subject_hex;
  Serialization serialization;
  json resources;
};

absl::Status ReadHashType(const std::string* hash_type, const std::string& name,
                          Serialization* ser) {
  const auto a3 = RuleFor(name, "A3");
  if (hash_type == nullptr) return a3("serialization.hash_type is absent");
  if (*hash_type == "sha256") {
    ser->hash = SignatureHash::kSha256;
  } else if (*hash_type == "blake2b") {
    ser->hash = SignatureHash::kBlake2b;
  } else if (*hash_type == "blake3") {
    return RuleError(
        name, "A7",
        "hash blake3: no packaged C library here verifies it; verify the folder with "
        "`model_signing verify`, then load without --signature, or re-sign with sha256 or blake2b");
  } else {
    return a3(absl::StrCat("serialization.hash_type '", internal::Escaped(*hash_type),
                           "' is none of sha256, blake2b, blake3"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Serialization> ReadSerialization(const json& pred, const std::string& name) {
  const auto a3 = RuleFor(name, "A3");
  const auto ser = pred.find("serialization");
  if (ser == pred.end() || !ser->is_object()) return a3("the predicate has no serialization");
  const std::string* method = StringAt(*ser, "method");
  if (method == nullptr || (*method != "files" && *method != "shards")) {
    return a3(absl::StrCat("serialization.method is ",
                           method ? absl::StrCat("'", internal::Escaped(*method), "'") : "absent",
                           ", not 'files' or 'shards'"));
  }
  Serialization s{.method = *method};
  PTD_RETURN_IF_ERROR(ReadHashType(StringAt(*ser, "hash_type"), name, &s));
  if (s.method == "shards") {
    const auto size = ser->find("shard_size");
    // The reference writes it as a float (16777216.0).
    if (size == ser->end() || !size->is_number()) return a3("serialization.shard_size is absent");
    const double d = size->get<double>();
    if (!(d >= 1) || d > 9007199254740992.0 || std::floor(d) != d) {
      return a3(absl::StrCat("serialization.shard_size ", size->dump(),
                             " is not a positive whole number"));
    }
    s.shard_size = static_cast<uint64_t>(d);
  }
  if (const auto ig = ser->find("ignore_paths"); ig != ser->end()) {
    if (!ig->is_array()) return a3("serialization.ignore_paths is not a list");
    for (const json& p : *ig) {
      if (!p.is_string()) return a3("serialization.ignore_paths holds a non-string");
      s.ignore_paths.push_back(p.get<std::string>());
    }
  }
  if (const auto sym = ser->find("allow_symlinks"); sym != ser->end()) {
    if (!sym->is_boolean()) return a3("serialization.allow_symlinks is not a boolean");
    s.allow_symlinks = sym->get<bool>();
  }
  return s;
}

absl::StatusOr<Statement> ReadStatement(const std::string& payload, const std::string& name) {
  const auto a3 = RuleFor(name, "A3");
  json st = json::parse(payload.begin(), payload.end(), nullptr, false);
  if (st.is_discarded() || !st.is_object()) return a3("the payload is not one JSON object");
  const std::string* type = StringAt(st, "_type");
  if (type == nullptr || *type != kStatementType) {
    return a3(absl::StrCat("the payload's _type is not '", Sv(kStatementType), "'"));
  }
  const std::string* predicate_type = StringAt(st, "predicateType");
  if (predicate_type != nullptr && *predicate_type == kPredicateTypeV02) {
    return RuleError(name, "A7",
                     absl::StrCat("predicate type ", Sv(kPredicateTypeV02),
                                  " (model_signing 0.x): verify it with model_signing"));
  }
  if (predicate_type == nullptr || *predicate_type != kPredicateType) {
    return a3(absl::StrCat("the predicateType is not '", Sv(kPredicateType), "'"));
  }
  const auto subject = st.find("subject");
  if (subject == st.end() || !subject->is_array() || subject->size() != 1) {
    return a3("the statement has not exactly one subject");
  }
  const auto sdigest = (*subject)[0].find("digest");
  const std::string* subject_hex = (*subject)[0].is_object() && sdigest != (*subject)[0].end()
                                       ? StringAt(*sdigest, "sha256")
                                       : nullptr;
  if (subject_hex == nullptr) return a3("the subject has no digest.sha256");
  const auto pred = st.find("predicate");
  if (pred == st.end() || !pred->is_object()) return a3("the statement has no predicate object");
  PTD_ASSIGN_OR_RETURN(Serialization ser, ReadSerialization(*pred, name));
  const auto res = pred->find("resources");
  if (res == pred->end() || !res->is_array()) return a3("the predicate has no resources list");
  return Statement{
      .subject_hex = *subject_hex, .serialization = std::move(ser), .resources = std::move(*res)};
}

using Resource = std::pair<std::string, SignedFile::Shard>;

// One resource: its path and shard (the whole file unless sharded), its raw
// digest added to `root`.
absl::StatusOr<Resource> ReadResource(const json& r, size_t i, const Serialization& ser,
                                      const std::string& want_algorithm, const std::string& name,
                                      SignatureDigest* root) {
  const auto a3 = RuleFor(name, "A3");
  const std::string* rname = StringAt(r, "name");
  const std::string* alg = StringAt(r, "algorithm");
  const std::string* hex = StringAt(r, "digest");
  if (rname == nullptr || alg == nullptr || hex == nullptr) {
    return a3(absl::StrCat("resource ", i, " lacks a string name, algorithm or digest"));
  }
  if (*alg != want_algorithm) {
    return a3(absl::StrCat("resource '", internal::Escaped(*rname), "' has algorithm '",
                           internal::Escaped(*alg), "', the serialization says '", want_algorithm,
                           "'"));
  }
  const bool is_hex = std::all_of(hex->begin(), hex->end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
  if (hex->size() != 2 * ser.digest_size() || !is_hex) {
    return a3(absl::StrCat("resource '", internal::Escaped(*rname), "' digest is not ",
                           2 * ser.digest_size(), " hex digits"));
  }
  std::string raw = absl::HexStringToBytes(*hex);
  root->Update(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  SignedFile::Shard shard{.start = 0, .end = SignedFile::kWholeFile, .digest = std::move(raw)};
  std::string path = *rname;
  if (ser.shard_size != 0) {
    // PATH:START:END, the path itself may hold ':'.
    const size_t c2 = rname->rfind(':');
    const size_t c1 =
        c2 == std::string::npos || c2 == 0 ? std::string::npos : rname->rfind(':', c2 - 1);
    uint64_t start = 0, end = 0;
    if (c1 == std::string::npos ||
        !absl::SimpleAtoi(Sv(std::string_view(*rname).substr(c1 + 1, c2 - c1 - 1)), &start) ||
        !absl::SimpleAtoi(Sv(std::string_view(*rname).substr(c2 + 1)), &end) || end <= start) {
      return a3(absl::StrCat("shard resource '", internal::Escaped(*rname),
                             "' is not PATH:START:END with START < END"));
    }
    path = rname->substr(0, c1);
    shard.start = start;
    shard.end = end;
  }
  if (!SafeName(path)) {
    return a3(absl::StrCat("resource name '", internal::Escaped(path),
                           "' is not a relative path inside the folder"));
  }
  return Resource(std::move(path), std::move(shard));
}

// The statement's resources, checked against its subject digest (A3).
absl::StatusOr<std::vector<Resource>> ReadResources(const Statement& st, const std::string& name) {
  const Serialization& ser = st.serialization;
  const std::string want_algorithm =
      ser.shard_size != 0
          ? absl::StrCat(Sv(SignatureHashName(ser.hash)), "-sharded-", ser.shard_size)
          : std::string(SignatureHashName(ser.hash));
  SignatureDigest root(SignatureHash::kSha256);
  std::vector<Resource> entries;
  entries.reserve(st.resources.size());
  for (size_t i = 0; i < st.resources.size(); ++i) {
    PTD_ASSIGN_OR_RETURN(Resource r,
                         ReadResource(st.resources[i], i, ser, want_algorithm, name, &root));
    entries.push_back(std::move(r));
  }
  const std::string root_hex = absl::BytesToHexString(root.Finish());
  if (st.subject_hex != root_hex) {
    return RuleError(name, "A3",
                     absl::StrCat("the subject digest is ", internal::Escaped(st.subject_hex),
                                  ", the resources hash to ", root_hex));
  }
  return entries;
}

// The resources as files sorted by name, each file's shards back to back
// (A3).
absl::StatusOr<std::vector<SignedFile>> GroupIntoFiles(std::vector<Resource> entries,
                                                       uint64_t shard_size,
                                                       const std::string& name) {
  const auto a3 = RuleFor(name, "A3");
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.start < b.second.start;
  });
  std::vector<SignedFile> files;
  for (auto& [path, shard] : entries) {
    if (files.empty() || files.back().name != path) {
      files.push_back(SignedFile{.name = path, .shards = {}});
    } else if (shard_size == 0) {
      return a3(absl::StrCat("file '", internal::Escaped(path), "' is listed twice"));
    }
    SignedFile& f = files.back();
    if (shard_size != 0) {
      const uint64_t want_start = f.shards.empty() ? 0 : f.shards.back().end;
      if (shard.start != want_start) {
        return a3(absl::StrCat("the shards of '", internal::Escaped(path),
                               "' are not back to back: ", shard.start, ":", shard.end, " follows ",
                               want_start));
      }
      if (!f.shards.empty() && f.shards.back().end - f.shards.back().start != shard_size) {
        return a3(absl::StrCat("shard ", f.shards.back().start, ":", f.shards.back().end, " of '",
                               internal::Escaped(path), "' is not the last yet not ", shard_size,
                               " bytes"));
      }
      if (shard.end - shard.start > shard_size) {
        return a3(absl::StrCat("shard ", shard.start, ":", shard.end, " of '",
                               internal::Escaped(path), "' is longer than the shard size ",
                               shard_size));
      }
    }
    f.shards.push_back(std::move(shard));
  }
  return files;
}

}  // namespace

absl::StatusOr<ModelSignature> ModelSignature::Parse(std::string_view bundle_json,
                                                     const Trust& trust, std::string name,
                                                     std::string model_dir) {
  if (trust.public_key_pem.empty() == trust.certificate_chain_pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": give exactly one of a public key and a certificate chain"));
  }
  if (bundle_json.size() > kMaxSignatureBytes) {
    return RuleError(name, "A1",
                     absl::StrCat("the signature file is ", bundle_json.size(), " bytes, over the ",
                                  kMaxSignatureBytes, " this reads"));
  }
  const json bundle = json::parse(bundle_json.begin(), bundle_json.end(), nullptr, false);
  if (bundle.is_discarded() || !bundle.is_object()) {
    return RuleError(name, "A1", "the signature file is not one JSON object");
  }
  PTD_ASSIGN_OR_RETURN(const Envelope envelope, ReadEnvelope(bundle, name));  // A1, A7
  ModelSignature s;
  PTD_ASSIGN_OR_RETURN(s.method_, CheckEnvelopeSignature(envelope, trust, name));   // A2
  PTD_ASSIGN_OR_RETURN(const Statement st, ReadStatement(envelope.payload, name));  // A3, A7
  PTD_ASSIGN_OR_RETURN(std::vector<Resource> entries, ReadResources(st, name));
  PTD_ASSIGN_OR_RETURN(s.files_,
                       GroupIntoFiles(std::move(entries), st.serialization.shard_size, name));
  s.serialization_ = st.serialization.method;
  s.hash_ = st.serialization.hash;
  s.shard_size_ = st.serialization.shard_size;
  s.ignore_paths_ = st.serialization.ignore_paths;
  s.allow_symlinks_ = st.serialization.allow_symlinks;
  s.path_ = std::move(name);
  s.model_dir_ = std::move(model_dir);
  s.self_name_ = s.RelativeName(s.path_);
  return s;
}

const SignedFile* ModelSignature::Find(std::string_view name) const {
  const auto it =
      std::lower_bound(files_.begin(), files_.end(), name,
                       [](const SignedFile& f, std::string_view n) { return f.name < n; });
  return it != files_.end() && it->name == name ? &*it : nullptr;
}

std::optional<std::string> ModelSignature::RelativeName(std::string_view path) const {
  std::error_code ec;
  const auto dir = std::filesystem::weakly_canonical(model_dir_, ec);
  if (ec) return std::nullopt;
  const auto file = std::filesystem::weakly_canonical(std::string(path), ec);
  if (ec) return std::nullopt;
  const auto rel = file.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  return rel.generic_string();
}

bool ModelSignature::Ignores(std::string_view name) const {
  const auto under = [&](std::string_view ignored) {
    while (!ignored.empty() && ignored.back() == '/') ignored.remove_suffix(1);
    if (ignored.empty()) return false;
    return name == ignored ||
           (name.size() > ignored.size() && name.substr(0, ignored.size()) == ignored &&
            name[ignored.size()] == '/');
  };
  for (const std::string& p : ignore_paths_) {
    if (under(p)) return true;
  }
  return self_name_ && under(*self_name_);
}

SignatureReport SignatureReport::OfFailedLoad(const SignatureOptions& options,
                                              std::string_view ptd_path,
                                              const absl::Status& error) {
  SignatureReport r;
  r.checked = true;
  r.signature = options.signature;
  r.model_dir = SignedModelDir(options, ptd_path);
  (void)r.Fail(error);
  return r;
}

absl::Status SignatureReport::Fail(absl::Status st) {
  if (!error) {
    error = std::string(st.message());
    rule = RuleOf(st);
  }
  verified = false;
  return st;
}

}  // namespace ptd
