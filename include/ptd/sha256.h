// Streaming SHA-256 over OpenSSL's EVP interface.
#ifndef PTD_SHA256_H_
#define PTD_SHA256_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/types/span.h"

namespace ptd {

// Thread-safety: one instance per thread.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::Span<const uint8_t> bytes);
  // Finishes the digest and returns it as 64 lowercase hex characters. The
  // object must not be updated afterwards.
  std::string HexDigest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// One-shot helper.
std::string Sha256Hex(absl::Span<const uint8_t> bytes);

}  // namespace ptd

#endif  // PTD_SHA256_H_
