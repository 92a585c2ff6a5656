// Test support: signed model folders as OpenSSF model signing writes them
// (docs/SPEC.md section 8), made in-process with OpenSSL, so that the C++
// tests need no Python. The interop with the reference (model_signing on
// PyPI) is python/tests/test_signing.py's.
#ifndef PTD_TESTS_TESTING_SIGNING_FIXTURE_H_
#define PTD_TESTS_TESTING_SIGNING_FIXTURE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace ptd::testing {

// An EC key pair (P-256 by default; NID_secp384r1, NID_secp521r1).
struct TestKey {
  std::string private_pem, public_pem;
  static TestKey Make(int curve_nid = 0);
  // The DER ECDSA signature of `data` with the curve's hash.
  std::string Sign(std::string_view data) const;
  // The reference's key hint: hex SHA-256 of public_pem.
  std::string Hint() const;
};

// How to sign a folder.
struct SignSpec {
  std::string method = "files";  // "files" or "shards".
  std::string hash = "sha256";   // "sha256" or "blake2b" (anything else is written as is).
  uint64_t shard_size = 1024;
  std::vector<std::string> ignore_paths = {"model.sig"};
};

// The in-toto statement of `dir` as model_signing writes it: every file not
// ignored, its digest (or its shards'), the subject digest over them.
nlohmann::json StatementFor(const std::string& dir, const SignSpec& spec);
// The subject digest of a statement's resources (after editing them).
void ResetSubjectDigest(nlohmann::json* statement);
// A Sigstore bundle (key method) of `payload`, signed by `key`.
std::string KeyBundle(const TestKey& key, std::string_view payload);
// Signs `dir` to `dir`/model.sig; returns the bundle's text.
std::string SignFolder(const std::string& dir, const TestKey& key, const SignSpec& spec);

// Writes `text` to `path` (creating folders).
void WriteFile(const std::string& path, std::string_view text);
std::string ReadFile(const std::string& path);

}  // namespace ptd::testing

#endif  // PTD_TESTS_TESTING_SIGNING_FIXTURE_H_
