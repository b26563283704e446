// A PNG (a sandbox's screenshot) decoded to 8-bit RGB with libpng's simplified API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::cli {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3
};

// A PNG of any other size than width x height is refused before it is decoded.
Result<RgbImage> DecodePng(const std::string& png, int width, int height);

}  // namespace warren::cli
