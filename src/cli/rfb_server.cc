#include "cli/rfb_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace warren::cli {
namespace {

void Put16(std::string& out, uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v & 0xff);
}
void Put32(std::string& out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v >> 16));
  Put16(out, static_cast<uint16_t>(v & 0xffff));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }

std::string FormatBytes(const RfbPixelFormat& f) {
  std::string out;
  out += static_cast<char>(f.bits_per_pixel);
  out += static_cast<char>(f.depth);
  out += static_cast<char>(f.big_endian);
  out += static_cast<char>(f.true_colour);
  Put16(out, f.red_max);
  Put16(out, f.green_max);
  Put16(out, f.blue_max);
  out += static_cast<char>(f.red_shift);
  out += static_cast<char>(f.green_shift);
  out += static_cast<char>(f.blue_shift);
  out.append(3, '\0');
  return out;
}

RfbPixelFormat ParseFormat(const uint8_t* p) {
  RfbPixelFormat f;
  f.bits_per_pixel = p[0];
  f.depth = p[1];
  f.big_endian = p[2] != 0;
  f.true_colour = p[3] != 0;
  f.red_max = Get16(p + 4);
  f.green_max = Get16(p + 6);
  f.blue_max = Get16(p + 8);
  f.red_shift = p[10];
  f.green_shift = p[11];
  f.blue_shift = p[12];
  return f;
}

// True colour, 8/16/32 bits, each channel's maximum 2^n-1 (1..8 bits) placed within the pixel:
// what EncodePixels can shift without overflow.
bool ValidFormat(const RfbPixelFormat& f) {
  if (!f.true_colour) return false;
  if (f.bits_per_pixel != 8 && f.bits_per_pixel != 16 && f.bits_per_pixel != 32) return false;
  for (auto [max, shift] :
       {std::pair{f.red_max, f.red_shift}, std::pair{f.green_max, f.green_shift},
        std::pair{f.blue_max, f.blue_shift}}) {
    int bits = 0;
    while (bits < 16 && (1u << bits) - 1 < max) ++bits;
    if (max == 0 || (1u << bits) - 1 != max || bits > 8 || shift + bits > f.bits_per_pixel)
      return false;
  }
  return true;
}

}  // namespace

std::string EncodePixels(const uint8_t* rgb, int width, int x, int y, int w, int h,
                         const RfbPixelFormat& f) {
  const int bytes = f.bits_per_pixel / 8;
  std::string out(static_cast<size_t>(w) * static_cast<size_t>(h) * static_cast<size_t>(bytes),
                  '\0');
  auto* o = reinterpret_cast<uint8_t*>(out.data());
  for (int row = 0; row < h; ++row) {
    const uint8_t* p =
        rgb +
        (static_cast<size_t>(y + row) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3;
    for (int col = 0; col < w; ++col, p += 3) {
      // Each channel scaled from 0..255 to 0..max, rounded.
      const uint32_t r = (p[0] * uint32_t{f.red_max} + 127) / 255;
      const uint32_t g = (p[1] * uint32_t{f.green_max} + 127) / 255;
      const uint32_t b = (p[2] * uint32_t{f.blue_max} + 127) / 255;
      const uint32_t v = r << f.red_shift | g << f.green_shift | b << f.blue_shift;
      for (int i = 0; i < bytes; ++i)
        *o++ = static_cast<uint8_t>(f.big_endian ? v >> (8 * (bytes - 1 - i)) : v >> (8 * i));
    }
  }
  return out;
}

Status RfbSession::ReadExact(void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t got = read(sock_.get(), p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoStatus("read", "vnc client");
    if (got == 0) return Status(Code::kUnavailable, "read", "vnc client", "the client left");
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

Status RfbSession::WriteAll(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(sock_.get(), data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write", "vnc client");
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RfbSession::Handshake(int width, int height, const std::string& name) {
  WARREN_RETURN_IF_ERROR(WriteAll("RFB 003.008\n"));
  // "RFB 003.00x\n", exactly 12 bytes; nothing of it is echoed (a terminal would run it).
  char version[12];
  WARREN_RETURN_IF_ERROR(ReadExact(version, sizeof version));
  auto digit = [&](int i) { return version[i] >= '0' && version[i] <= '9'; };
  if (memcmp(version, "RFB 003.", 8) != 0 || !digit(8) || !digit(9) || !digit(10) ||
      version[11] != '\n')
    return Invalid("vnc: the client does not speak RFB 3.x");
  const int minor = (version[8] - '0') * 100 + (version[9] - '0') * 10 + (version[10] - '0');
  if (minor >= 7) {
    WARREN_RETURN_IF_ERROR(WriteAll(std::string("\x01\x01", 2)));  // one type: None
    uint8_t chosen = 0;
    WARREN_RETURN_IF_ERROR(ReadExact(&chosen, 1));
    if (chosen != 1) {
      if (minor >= 8) {  // a failed SecurityResult with its reason
        std::string fail;
        const std::string why = "only security type None (1) is offered";
        Put32(fail, 1);
        Put32(fail, static_cast<uint32_t>(why.size()));
        (void)WriteAll(fail + why);
      }
      return Invalid("vnc: the client chose a security type other than None");
    }
    if (minor >= 8) WARREN_RETURN_IF_ERROR(WriteAll(std::string(4, '\0')));  // OK
  } else {
    std::string none;
    Put32(none, 1);  // 3.3: the server decides
    WARREN_RETURN_IF_ERROR(WriteAll(none));
  }
  uint8_t shared = 0;
  WARREN_RETURN_IF_ERROR(ReadExact(&shared, 1));
  std::string init;
  Put16(init, static_cast<uint16_t>(width));
  Put16(init, static_cast<uint16_t>(height));
  init += FormatBytes(format_);
  Put32(init, static_cast<uint32_t>(name.size()));
  init += name;
  return WriteAll(init);
}

Result<RfbClientMessage> RfbSession::Read() {
  uint8_t type = 0;
  WARREN_RETURN_IF_ERROR(ReadExact(&type, 1));
  RfbClientMessage m;
  uint8_t b[19];
  switch (type) {
    case 0: {  // SetPixelFormat
      WARREN_RETURN_IF_ERROR(ReadExact(b, 19));
      RfbPixelFormat f = ParseFormat(b + 3);
      if (!ValidFormat(f))
        return Invalid(
            "vnc: only true-colour pixel formats of 8, 16 or 32 bits, each channel's "
            "maximum 2^n-1 and within the pixel, are served");
      format_ = f;
      return m;
    }
    case 2: {  // SetEncodings: Raw is always there; the list is read and passed over
      WARREN_RETURN_IF_ERROR(ReadExact(b, 3));
      std::string skip(size_t{Get16(b + 1)} * 4, '\0');
      WARREN_RETURN_IF_ERROR(ReadExact(skip.data(), skip.size()));
      return m;
    }
    case 3:  // FramebufferUpdateRequest
      WARREN_RETURN_IF_ERROR(ReadExact(b, 9));
      m.kind = RfbClientMessage::Kind::kUpdateRequest;
      m.incremental = b[0] != 0;
      m.x = Get16(b + 1), m.y = Get16(b + 3), m.w = Get16(b + 5), m.h = Get16(b + 7);
      return m;
    case 4:  // KeyEvent
      WARREN_RETURN_IF_ERROR(ReadExact(b, 7));
      m.kind = RfbClientMessage::Kind::kKey;
      m.down = b[0] != 0;
      m.keysym = Get32(b + 3);
      return m;
    case 5:  // PointerEvent
      WARREN_RETURN_IF_ERROR(ReadExact(b, 5));
      m.kind = RfbClientMessage::Kind::kPointer;
      m.buttons = b[0];
      m.x = Get16(b + 1), m.y = Get16(b + 3);
      return m;
    case 6: {  // ClientCutText: read and dropped (at most 1 MiB)
      WARREN_RETURN_IF_ERROR(ReadExact(b, 7));
      const uint32_t n = Get32(b + 3);
      if (n > (1u << 20)) return Invalid("vnc: cut text over 1 MiB");
      std::string skip(n, '\0');
      WARREN_RETURN_IF_ERROR(ReadExact(skip.data(), skip.size()));
      return m;
    }
    default:
      return Invalid("vnc: unknown client message type " + std::to_string(type));
  }
}

Status RfbSession::SendRect(const uint8_t* rgb, int width, int x, int y, int w, int h) {
  std::string out;
  out += '\0';  // FramebufferUpdate
  out += '\0';
  Put16(out, 1);
  Put16(out, static_cast<uint16_t>(x));
  Put16(out, static_cast<uint16_t>(y));
  Put16(out, static_cast<uint16_t>(w));
  Put16(out, static_cast<uint16_t>(h));
  Put32(out, 0);  // Raw
  out += EncodePixels(rgb, width, x, y, w, h, format_);
  return WriteAll(out);
}

}  // namespace warren::cli
