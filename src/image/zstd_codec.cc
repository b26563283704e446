#include "image/zstd_codec.h"

#include <zstd.h>

namespace warren::image {

std::string ZstdCompress(std::string_view bytes, int level) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), level);
  // Compressing into a buffer of ZSTD_compressBound cannot fail but for a bad level.
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

Result<std::string> ZstdDecompress(std::string_view frame, size_t size, const std::string& what) {
  // Into exactly `size` bytes: a frame holding more fails (dstSize_tooSmall), one holding
  // less is caught by the count.
  std::string out(size, '\0');
  const size_t n = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) return Invalid(std::string("decompress: ") + ZSTD_getErrorName(n), what);
  if (n != size)
    return Invalid(
        "decompress: the frame holds " + std::to_string(n) + " bytes, not " + std::to_string(size),
        what);
  return out;
}

}  // namespace warren::image
