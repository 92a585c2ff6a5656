// Signed models: OpenSSF model signing (docs/SPEC.md section 8, rules A1-A7),
// verified in C++ with OpenSSL.
//
// A model folder signed by `model_signing` 1.x carries a Sigstore bundle
// (model.sig by default): a DSSE envelope whose payload is an in-toto
// Statement listing a digest for every file of the folder (serialization
// "files") or for every shard_size-byte piece of each (serialization
// "shards"), with SHA-256 or BLAKE2b-512.
//
// Three steps, each usable alone:
//   ModelSignature::Open    reads the signature file and checks it against
//                           the trust material the caller supplies (A1, A2,
//                           A3, A7). Nothing in the file is trusted by itself.
//   CheckSignedFolder       lists the folder against the signed resources
//                           (A4, A6) and hashes every file that the caller
//                           does not hash itself (A5).
//   the loader              hashes the .ptd on the same reads that load it
//                           (LoadOptions::signature; runtime/signing/
//                           file_hasher.h): no byte of it is read twice.
//
// Example:
//   SignatureOptions opts{.signature = "m/model.sig", .public_key = "key.pub"};
//   absl::StatusOr<ModelSignature> sig = ModelSignature::Open(opts, "m");
//   if (!sig.ok()) ...  // "m/model.sig: ... (A2)"
//   SignatureReport report;
//   absl::Status st = CheckSignedFolder(*sig, {}, /*threads=*/4, &report);
//
// Every error's message ends with its rule, " (A5)", and carries it for RuleOf
// (ptd/rules.h).
// Thread-safety: a ModelSignature is immutable after Open; its const methods
// may be called concurrently.
#ifndef PTD_MODEL_SIGNATURE_H_
#define PTD_MODEL_SIGNATURE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ptd {

// What to check a signed model against. Exactly one of public_key and
// certificate_chain.
struct SignatureOptions {
  // The signature file (a Sigstore bundle, `model.sig` by default).
  std::string signature;
  // Key method: a PEM file with the signer's EC public key (P-256, P-384 or
  // P-521).
  std::string public_key;
  // Certificate method: a PEM file with the certificates the user trusts
  // (roots and, if wanted, intermediates); the signing certificate and any
  // intermediates come from the signature file and must chain to them.
  std::string certificate_chain;
  // The signed folder. Empty: the folder of the file being loaded or
  // verified (the .ptd's).
  std::string model_dir;

  bool enabled() const { return !signature.empty(); }
};

// The resolved model folder of `options` for a load of `ptd_path`: its
// model_dir, else the folder that holds ptd_path.
std::string SignedModelDir(const SignatureOptions& options, std::string_view ptd_path);

enum class SignatureHash { kSha256, kBlake2b };
std::string_view SignatureHashName(SignatureHash hash);  // "sha256", "blake2b"

// One file of the signed folder, as the signature lists it.
struct SignedFile {
  struct Shard {
    uint64_t start = 0;
    uint64_t end = 0;    // Exclusive.
    std::string digest;  // Raw bytes.
  };
  std::string name;  // Relative to the folder, '/'-separated.
  // "files": one shard, [0, kWholeFile). "shards": in order, back to back
  // from 0 (checked by Open: A3).
  std::vector<Shard> shards;
  static constexpr uint64_t kWholeFile = ~uint64_t{0};
  // The file's size as the shards say it ("shards" only).
  std::optional<uint64_t> size() const;
};

class ModelSignature {
 public:
  // Reads options.signature and checks it: A1 (shape and encoding), A2 (the
  // signature verifies with options.public_key or, chained to
  // options.certificate_chain, the signing certificate), A3 (the statement:
  // its type, predicate type, method, hash and subject digest), A7 (a method
  // or hash this implementation cannot verify). `model_dir` is the signed
  // folder (SignedModelDir). InvalidArgument when the options name no trust
  // material or both kinds; NotFound/PermissionDenied for a file that cannot
  // be read. Rule errors are DataLoss, each message
  // naming the signature file and ending with the rule.
  static absl::StatusOr<ModelSignature> Open(const SignatureOptions& options,
                                             std::string model_dir);
  // The same over the signature file's bytes and the trust material's PEM
  // text (no file access). `name` names the signature in messages.
  struct Trust {
    std::string public_key_pem;
    std::string certificate_chain_pem;
  };
  static absl::StatusOr<ModelSignature> Parse(std::string_view bundle_json, const Trust& trust,
                                              std::string name, std::string model_dir);

  std::string_view method() const { return method_; }                // "key", "certificate"
  std::string_view serialization() const { return serialization_; }  // "files", "shards"
  SignatureHash hash() const { return hash_; }
  uint64_t shard_size() const { return shard_size_; }  // "shards" only; else 0.
  bool sharded() const { return shard_size_ != 0; }
  size_t digest_size() const { return hash_ == SignatureHash::kSha256 ? 32 : 64; }
  const std::string& path() const { return path_; }  // The signature file.
  const std::string& model_dir() const { return model_dir_; }
  const std::vector<std::string>& ignore_paths() const { return ignore_paths_; }
  bool allow_symlinks() const { return allow_symlinks_; }
  // Sorted by name.
  const std::vector<SignedFile>& files() const { return files_; }
  const SignedFile* Find(std::string_view name) const;
  // `path`'s name relative to model_dir() ('/'-separated), or nullopt when
  // it lies outside it.
  std::optional<std::string> RelativeName(std::string_view path) const;
  // Whether the signature ignores `name` (its ignore_paths, or the signature
  // file itself): the name or a folder above it.
  bool Ignores(std::string_view name) const;

 private:
  ModelSignature() = default;

  std::string path_, model_dir_;
  std::string method_, serialization_;
  SignatureHash hash_ = SignatureHash::kSha256;
  uint64_t shard_size_ = 0;
  bool allow_symlinks_ = false;
  std::vector<std::string> ignore_paths_;
  std::optional<std::string> self_name_;  // The signature file's, in the folder.
  std::vector<SignedFile> files_;
};

// A streaming digest of the signature's hash (OpenSSL EVP).
class SignatureDigest {
 public:
  explicit SignatureDigest(SignatureHash hash);
  ~SignatureDigest();
  SignatureDigest(SignatureDigest&& other) noexcept;
  SignatureDigest& operator=(SignatureDigest&& other) noexcept;
  SignatureDigest(const SignatureDigest&) = delete;
  SignatureDigest& operator=(const SignatureDigest&) = delete;

  void Update(const uint8_t* data, size_t n);
  // The raw digest; the object must not be updated afterwards.
  std::string Finish();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX.
};

// What a signature check found, for the reports (JSON "signature").
struct SignatureReport {
  struct File {
    std::string name;
    uint64_t bytes = 0;
    // "load": hashed on the load's own reads; "apart": read to be hashed.
    std::string read;
    bool ok = false;
    std::string error;  // When !ok: the message, ending with the rule.
  };
  bool checked = false;   // A signature was given.
  bool verified = false;  // Every rule held.
  std::string signature;  // The signature file.
  std::string model_dir;
  std::string method, serialization, hash;
  uint64_t shard_size = 0;
  std::vector<File> files;
  std::optional<std::string> error;  // The first error, ending with its rule.
  std::optional<std::string> rule;   // Its rule.
  // Whether the load hashed the .ptd on its own reads (false: read apart,
  // with the reason in one_pass_note).
  bool one_pass = false;
  std::string one_pass_note;

  // Records `st` as the report's error (the first one wins); returns it.
  absl::Status Fail(absl::Status st);
  // The report of a signed load of `ptd_path` that failed with `error` (the
  // load hands out no result to carry its report): checked, not verified,
  // the error and its rule.
  static SignatureReport OfFailedLoad(const SignatureOptions& options, std::string_view ptd_path,
                                      const absl::Status& error);
};

// Checks the folder against the signature: every file in it is listed or
// ignored (A6), every listed file exists and, for "shards", is covered byte
// for byte by its shards (A4), and every listed file whose name is not in
// `hashed_by_caller` hashes to its signed digests (A5), read `threads` at a
// time (shards of one file in parallel). Appends a File per listed file to
// `report` (those in hashed_by_caller with read "load", ok left for the
// caller). The first error, naming the file (and the shard's range), with
// its rule.
absl::Status CheckSignedFolder(const ModelSignature& signature,
                               absl::Span<const std::string> hashed_by_caller, size_t threads,
                               SignatureReport* report);

// The signature's method, serialization, hash and shard size into `report`.
void DescribeSignature(const ModelSignature& signature, SignatureReport* report);

// A4 for the files a load or verification reads (`read_paths`: the .ptd,
// and the .pte or manifest when given): each must be a file the signature
// lists, under its path relative to the signed folder.
absl::Status CheckSignatureCovers(const ModelSignature& signature,
                                  absl::Span<const std::string> read_paths,
                                  SignatureReport* report);

// The whole check in one call: Open (the folder: SignedModelDir of the
// first of `read_paths`), CheckSignatureCovers, then CheckSignedFolder
// hashing every file. Fills `report` (which may be null).
absl::Status VerifySignedModel(const SignatureOptions& options,
                               absl::Span<const std::string> read_paths, size_t threads,
                               SignatureReport* report);

}  // namespace ptd

#endif  // PTD_MODEL_SIGNATURE_H_
