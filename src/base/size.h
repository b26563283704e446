// Human sizes ("512M", "1G", "64k") to bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace warren {

// Parses a size with an optional K/M/G/T suffix (powers of 1024, case-insensitive, optional
// trailing "B" or "iB"). A bare number is bytes. Returns nullopt on malformed input.
std::optional<uint64_t> ParseSize(std::string_view s);

}  // namespace warren
