// The server side of RFB 3.3/3.7/3.8 (RFC 6143), the protocol every VNC client speaks, over
// one connected socket: the handshake with no authentication (the listener is the user's own,
// on loopback by default), the client's messages, and framebuffer updates in the Raw
// encoding, in whatever true-colour pixel format the client asks for. What the screen is and
// where input goes is the caller's (cli/vnc.cc: a sandbox's screen through the API).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::cli {

struct RfbPixelFormat {
  uint8_t bits_per_pixel = 32, depth = 24;
  bool big_endian = false, true_colour = true;
  uint16_t red_max = 255, green_max = 255, blue_max = 255;
  uint8_t red_shift = 16, green_shift = 8, blue_shift = 0;
};

// A region of an RGB image (3 bytes a pixel, `width` pixels a row) in `format`.
std::string EncodePixels(const uint8_t* rgb, int width, int x, int y, int w, int h,
                         const RfbPixelFormat& format);

// One message from the client, as the caller needs it.
struct RfbClientMessage {
  enum class Kind { kUpdateRequest, kPointer, kKey, kOther };
  Kind kind = Kind::kOther;
  bool incremental = false;  // kUpdateRequest
  int x = 0, y = 0, w = 0, h = 0;
  uint8_t buttons =
      0;              // kPointer: bit 0 left, 1 middle, 2 right, 3/4 wheel up/down, 5/6 left/right
  bool down = false;  // kKey
  uint32_t keysym = 0;  // kKey
};

class RfbSession {
 public:
  explicit RfbSession(UniqueFd sock) : sock_(std::move(sock)) {}
  // Version, security type None, ClientInit, ServerInit with the screen's size and name.
  Status Handshake(int width, int height, const std::string& name);
  // The next message; SetPixelFormat and SetEncodings are taken here (kOther). A colour-map
  // pixel format or a bad message is an error: the caller ends the session.
  Result<RfbClientMessage> Read();
  // A FramebufferUpdate of one Raw rectangle of `rgb` (the whole screen, `width` wide).
  Status SendRect(const uint8_t* rgb, int width, int x, int y, int w, int h);
  int fd() const { return sock_.get(); }

 private:
  Status ReadExact(void* buf, size_t n);
  Status WriteAll(const std::string& data);

  UniqueFd sock_;
  RfbPixelFormat format_;
};

}  // namespace warren::cli
