#include "base/size.h"

#include <cctype>

namespace warren {

std::optional<uint64_t> ParseSize(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (i == 0) return std::nullopt;
  std::string_view rest = s.substr(i);
  uint64_t mult = 1;
  if (!rest.empty()) {
    switch (std::tolower(static_cast<unsigned char>(rest[0]))) {
      case 'k':
        mult = 1ull << 10;
        break;
      case 'm':
        mult = 1ull << 20;
        break;
      case 'g':
        mult = 1ull << 30;
        break;
      case 't':
        mult = 1ull << 40;
        break;
      case 'b':
        mult = 1;
        break;
      default:
        return std::nullopt;
    }
    rest.remove_prefix(1);
    if (rest == "i" || rest == "iB" || rest == "ib") rest = "";
    if (rest == "B" || rest == "b") rest = "";
    if (!rest.empty()) return std::nullopt;
  }
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

}  // namespace warren
