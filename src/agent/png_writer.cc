#include "agent/png_writer.h"

#include <png.h>

#include <csetjmp>

namespace warren::agent {

// libpng reports errors by longjmp to the setjmp of the call that failed: every call into it
// below sits behind its own setjmp, and nothing with a destructor lives between them.
struct PngWriter::Impl {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::string out;
  uint32_t width = 0, height = 0, written = 0;
  bool failed = false;

  static void Write(png_structp p, png_bytep data, png_size_t n) {
    static_cast<Impl*>(png_get_io_ptr(p))->out.append(reinterpret_cast<char*>(data), n);
  }
  static void Flush(png_structp) {}
};

PngWriter::PngWriter(uint32_t width, uint32_t height) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.width = width;
  m.height = height;
  m.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (m.png) m.info = png_create_info_struct(m.png);
  if (!m.png || !m.info || setjmp(png_jmpbuf(m.png))) {
    m.failed = true;
    return;
  }
  png_set_write_fn(m.png, &m, &Impl::Write, &Impl::Flush);
  png_set_compression_level(m.png, 1);
  png_set_filter(m.png, 0, PNG_FILTER_SUB);
  png_set_IHDR(m.png, m.info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(m.png, m.info);
}

PngWriter::~PngWriter() {
  if (impl_->png) png_destroy_write_struct(&impl_->png, impl_->info ? &impl_->info : nullptr);
}

Status PngWriter::AddRows(const std::string& rgb, uint32_t rows) {
  Impl& m = *impl_;
  if (m.failed || rgb.size() < size_t{rows} * m.width * 3 || m.written + rows > m.height)
    return Status(Code::kInternal, "encode PNG", "screen", "bad rows");
  if (setjmp(png_jmpbuf(m.png))) {
    m.failed = true;
    return Status(Code::kInternal, "encode PNG", "screen", "libpng failed");
  }
  for (uint32_t r = 0; r < rows; ++r)
    png_write_row(m.png, reinterpret_cast<png_const_bytep>(rgb.data() + size_t{r} * m.width * 3));
  m.written += rows;
  return Status::Ok();
}

Result<std::string> PngWriter::Finish() {
  Impl& m = *impl_;
  if (m.failed || m.written != m.height)
    return Status(Code::kInternal, "encode PNG", "screen", "incomplete image");
  if (setjmp(png_jmpbuf(m.png))) {
    m.failed = true;
    return Status(Code::kInternal, "encode PNG", "screen", "libpng failed");
  }
  png_write_end(m.png, m.info);
  return std::move(m.out);
}

}  // namespace warren::agent
