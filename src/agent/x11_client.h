// Just enough of the X11 protocol, spoken over the display's unix socket, for a desktop
// sandbox's screen and input: the root window's pixels (GetImage) and synthetic input through
// the XTEST extension. The agent is static and runs in every sandbox; Xlib or xcb would bring
// their dependency trees into it for six requests, so these are written out (X Window System
// Protocol, X Consortium Standard, and the XTEST extension's protocol, X.Org 2.2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::agent {

class X11Connection {
 public:
  // Connects to display `:N` at /tmp/.X11-unix/XN (no authorization: the sandbox's own
  // server, started by the agent, takes local connections) and reads the server's setup.
  static Result<X11Connection> Open(int display);

  uint16_t width() const { return width_; }
  uint16_t height() const { return height_; }

  // Rows [y, y + rows) of the root window as packed RGB (width x rows x 3 bytes): a screen is
  // read in bands, so that a large one never sits whole in the agent's memory.
  Result<std::string> CaptureRgb(uint16_t y, uint16_t rows);

  // XTEST: a pointer move to (x, y) on the root window; a button's press or release (1 left,
  // 2 middle, 3 right, 4/5 wheel up/down, 6/7 wheel left/right); a key's press or release.
  Status MovePointer(int x, int y);
  Status Button(int button, bool press);
  Status Key(uint8_t keycode, bool press);

  // The keycode that gives `keysym`, and whether it needs Shift; a keysym no key has is put on
  // a spare keycode (as xdotool does) and stays there for the next time.
  Result<std::pair<uint8_t, bool>> KeycodeFor(uint32_t keysym);

  // Whether the root window has property `name` (e.g. _NET_SUPPORTING_WM_CHECK, which a
  // window manager sets once it manages the screen).
  Result<bool> RootHasProperty(const std::string& name);

  // A round trip: every request sent so far has been processed by the server.
  Status Sync();

 private:
  X11Connection() = default;
  Status Send(const std::string& req);
  Status ReadExact(void* buf, size_t n);
  // Reads the reply to the request just sent (skipping events; an error becomes a status
  // naming `what`): its 32-byte head and the extra data it announces.
  Result<std::string> Reply(const char* what);
  Status LoadKeyboardMapping();

  UniqueFd fd_;
  uint32_t root_ = 0;
  uint16_t width_ = 0, height_ = 0;
  uint8_t root_depth_ = 0;
  uint8_t bits_per_pixel_ = 0;  // of the root depth's ZPixmap format
  uint8_t min_keycode_ = 0, max_keycode_ = 0;
  uint8_t xtest_opcode_ = 0;
  uint8_t keysyms_per_keycode_ = 0;
  std::vector<uint32_t> keysyms_;  // (max - min + 1) x keysyms_per_keycode
};

}  // namespace warren::agent
