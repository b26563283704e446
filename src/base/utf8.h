// UTF-8 sanitising and base64 for output bytes that go into JSON.
#pragma once

#include <string>
#include <string_view>

namespace warren {

// Returns `in` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view in);
std::string Base64Encode(std::string_view in);
// Returns false on malformed input.
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace warren
