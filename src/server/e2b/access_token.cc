#include "server/e2b/access_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/sha256.h"

namespace warren::server::e2b {

AccessTokens::AccessTokens(std::string_view secret)
    : key_(Sha256Hex(std::string("warren e2b envd access v1:") + std::string(secret))) {}

std::string AccessTokens::For(std::string_view sandbox_id) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(sandbox_id.data()), sandbox_id.size(), mac, &n);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

bool AccessTokens::Matches(std::string_view sandbox_id, std::string_view token) const {
  const std::string want = For(sandbox_id);
  return token.size() == want.size() && CRYPTO_memcmp(want.data(), token.data(), want.size()) == 0;
}

}  // namespace warren::server::e2b
