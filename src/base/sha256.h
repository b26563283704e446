// SHA-256 of files and strings (OpenSSL EVP).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace warren {

// Lowercase hex digest.
Result<std::string> Sha256File(const std::string& path);
std::string Sha256Hex(std::string_view data);
// True when `s` is a digest as Sha256Hex writes it: 64 lowercase hex digits.
bool IsSha256Hex(std::string_view s);

// Incremental SHA-256, for verifying a stream (e.g. a registry blob) as it arrives.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  std::string HexDigest();  // finishes the hash; call once

 private:
  void* ctx_;  // EVP_MD_CTX
};

}  // namespace warren
