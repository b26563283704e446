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
// A digest's 32 raw bytes and back, for binary formats (layer manifests, prefetch packs).
// Sha256RawOf's `hex` must pass IsSha256Hex; Sha256HexOf's `raw` must be 32 bytes.
std::string Sha256RawOf(std::string_view hex);
std::string Sha256HexOf(std::string_view raw);

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
