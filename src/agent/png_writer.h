// PNG encoding of a screenshot, row band by row band (libpng), into memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace warren::agent {

class PngWriter {
 public:
  // An 8-bit RGB image of width x height; zlib at its fastest level (a desktop's flat
  // areas compress well at any level; a screenshot is on an agent's critical path).
  PngWriter(uint32_t width, uint32_t height);
  ~PngWriter();
  // `rows` rows of packed RGB, top to bottom.
  Status AddRows(const std::string& rgb, uint32_t rows);
  // The file's bytes; all height rows must have been added.
  Result<std::string> Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace warren::agent
