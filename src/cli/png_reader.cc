#include "cli/png_reader.h"

#include <png.h>

#include <cstring>

namespace warren::cli {

Result<RgbImage> DecodePng(const std::string& png, int width, int height) {
  png_image image;
  memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size()))
    return Invalid(std::string("not a PNG: ") + image.message);
  image.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  if (out.width != width || out.height != height) {
    png_image_free(&image);
    return Status(Code::kConflict, "decode screenshot", "png",
                  "a PNG of " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                      ", not of the screen's " + std::to_string(width) + "x" +
                      std::to_string(height));
  }
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr))
    return Invalid(std::string("PNG: ") + image.message);
  return out;
}

}  // namespace warren::cli
