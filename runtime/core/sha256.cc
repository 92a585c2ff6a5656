#include "ptd/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

#include "runtime/internal/check.h"

namespace ptd {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  // Allocation or algorithm failure here is an environment bug, not input.
  PTD_CHECK(ctx_->md != nullptr);
  PTD_CHECK(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_->md); }

void Sha256::Update(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  PTD_CHECK(EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1);
}

std::string Sha256::HexDigest() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  PTD_CHECK(EVP_DigestFinal_ex(ctx_->md, out, &len) == 1);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(out), len));
}

std::string Sha256Hex(absl::Span<const uint8_t> bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

}  // namespace ptd
