// SHA-256 of files and strings (OpenSSL EVP).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace warren {

// Lowercase hex digest.
Result<std::string> Sha256File(const std::string& path);
std::string Sha256Hex(std::string_view data);

}  // namespace warren
