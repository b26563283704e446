#include "agent/x11_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace warren::agent {
namespace {

// Core requests (opcodes from the protocol's encoding section) and XTEST's FakeInput.
constexpr uint8_t kInternAtom = 16, kGetProperty = 20, kGetInputFocus = 43, kGetImage = 73,
                  kQueryExtension = 98, kChangeKeyboardMapping = 100, kGetKeyboardMapping = 101;
constexpr uint8_t kXTestFakeInput = 2;
constexpr uint8_t kKeyPress = 2, kKeyRelease = 3, kButtonPress = 4, kButtonRelease = 5,
                  kMotionNotify = 6;
constexpr uint8_t kZPixmap = 2;

size_t Pad4(size_t n) { return (n + 3) & ~size_t{3}; }

void Put8(std::string& s, uint8_t v) { s.push_back(static_cast<char>(v)); }
void Put16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
void Put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
uint16_t Get16(const std::string& s, size_t off) {
  uint16_t v;
  memcpy(&v, s.data() + off, 2);
  return v;
}
uint32_t Get32(const std::string& s, size_t off) {
  uint32_t v;
  memcpy(&v, s.data() + off, 4);
  return v;
}

// A request's head: opcode, its one data byte, and its length in 4-byte units (filled in by
// Finish).
std::string Request(uint8_t opcode, uint8_t data) {
  std::string r;
  Put8(r, opcode);
  Put8(r, data);
  Put16(r, 0);
  return r;
}
std::string Finish(std::string r) {
  r.resize(Pad4(r.size()), '\0');
  uint16_t units = static_cast<uint16_t>(r.size() / 4);
  memcpy(r.data() + 2, &units, 2);
  return r;
}

Status Fail(const std::string& what, const std::string& why) {
  return Status(Code::kUnavailable, what, "display", why);
}

}  // namespace

Result<X11Connection> X11Connection::Open(int display) {
  X11Connection c;
  const std::string path = "/tmp/.X11-unix/X" + std::to_string(display);
  c.fd_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!c.fd_) return ErrnoStatus("socket", "display");
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path.c_str(), path.size());
  if (connect(c.fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return ErrnoStatus("connect", "display :" + std::to_string(display));
  // Little-endian, protocol 11.0, no authorization.
  std::string hello;
  Put8(hello, 'l');
  Put8(hello, 0);
  Put16(hello, 11);
  Put16(hello, 0);
  Put16(hello, 0);
  Put16(hello, 0);
  Put16(hello, 0);
  WARREN_RETURN_IF_ERROR(c.Send(hello));
  std::string head(8, '\0');
  WARREN_RETURN_IF_ERROR(c.ReadExact(head.data(), head.size()));
  std::string setup(static_cast<size_t>(Get16(head, 6)) * 4, '\0');
  WARREN_RETURN_IF_ERROR(c.ReadExact(setup.data(), setup.size()));
  if (head[0] != 1)
    return Fail("connect",
                "the X server refused: " + setup.substr(0, static_cast<uint8_t>(head[1])));
  if (setup.size() < 40) return Fail("connect", "short setup from the X server");
  const uint16_t vendor_len = Get16(setup, 16);
  const uint8_t screens = static_cast<uint8_t>(setup[20]),
                formats = static_cast<uint8_t>(setup[21]);
  if (setup[22] != 0) return Fail("connect", "the X server sends big-endian images");
  c.min_keycode_ = static_cast<uint8_t>(setup[26]);
  c.max_keycode_ = static_cast<uint8_t>(setup[27]);
  const size_t formats_at = 32 + Pad4(vendor_len), screen_at = formats_at + 8 * size_t{formats};
  if (screens < 1 || setup.size() < screen_at + 40) return Fail("connect", "no screen");
  c.root_ = Get32(setup, screen_at);
  c.width_ = Get16(setup, screen_at + 20);
  c.height_ = Get16(setup, screen_at + 22);
  c.root_depth_ = static_cast<uint8_t>(setup[screen_at + 38]);
  for (size_t i = 0; i < formats; ++i)
    if (static_cast<uint8_t>(setup[formats_at + 8 * i]) == c.root_depth_)
      c.bits_per_pixel_ = static_cast<uint8_t>(setup[formats_at + 8 * i + 1]);
  if (c.root_depth_ != 24 || c.bits_per_pixel_ != 32)
    return Fail("connect", "the screen is " + std::to_string(c.root_depth_) + "-bit at " +
                               std::to_string(c.bits_per_pixel_) +
                               " bits a pixel (24 at 32 needed)");

  std::string q = Request(kQueryExtension, 0);
  Put16(q, 5);
  Put16(q, 0);
  q += "XTEST";
  WARREN_RETURN_IF_ERROR(c.Send(Finish(q)));
  std::string ext = WARREN_TRY(c.Reply("query XTEST"));
  if (ext[8] == 0) return Fail("connect", "the X server has no XTEST extension");
  c.xtest_opcode_ = static_cast<uint8_t>(ext[9]);
  WARREN_RETURN_IF_ERROR(c.LoadKeyboardMapping());
  return c;
}

Status X11Connection::Send(const std::string& req) {
  size_t off = 0;
  while (off < req.size()) {
    ssize_t n = send(fd_.get(), req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write", "display");
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status X11Connection::ReadExact(void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = read(fd_.get(), p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoStatus("read", "display");
    if (got == 0) return Fail("read", "the X server closed the connection");
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

Result<std::string> X11Connection::Reply(const char* what) {
  for (;;) {
    std::string msg(32, '\0');
    WARREN_RETURN_IF_ERROR(ReadExact(msg.data(), msg.size()));
    if (msg[0] == 0)
      return Fail(what, "X error " + std::to_string(static_cast<uint8_t>(msg[1])) + " (request " +
                            std::to_string(static_cast<uint8_t>(msg[10])) + ")");
    if (msg[0] != 1) continue;  // an event (MappingNotify goes to every client)
    const size_t extra = static_cast<size_t>(Get32(msg, 4)) * 4;
    msg.resize(32 + extra);
    WARREN_RETURN_IF_ERROR(ReadExact(msg.data() + 32, extra));
    return msg;
  }
}

Result<bool> X11Connection::RootHasProperty(const std::string& name) {
  std::string q = Request(kInternAtom, 1);  // only if it exists
  Put16(q, static_cast<uint16_t>(name.size()));
  Put16(q, 0);
  q += name;
  WARREN_RETURN_IF_ERROR(Send(Finish(q)));
  const std::string atom_reply = WARREN_TRY(Reply("intern an atom"));
  const uint32_t atom = Get32(atom_reply, 8);
  if (atom == 0) return false;  // nobody has named it yet
  std::string g = Request(kGetProperty, 0);
  Put32(g, root_);
  Put32(g, atom);
  Put32(g, 0);  // any type
  Put32(g, 0);
  Put32(g, 1);
  WARREN_RETURN_IF_ERROR(Send(Finish(g)));
  const std::string prop = WARREN_TRY(Reply("read a property"));
  return Get32(prop, 8) != 0;  // its type: None when the window has no such property
}

Status X11Connection::Sync() {
  WARREN_RETURN_IF_ERROR(Send(Finish(Request(kGetInputFocus, 0))));
  return Reply("sync").status();
}

Status X11Connection::LoadKeyboardMapping() {
  std::string r = Request(kGetKeyboardMapping, 0);
  const uint8_t count = static_cast<uint8_t>(max_keycode_ - min_keycode_ + 1);
  Put8(r, min_keycode_);
  Put8(r, count);
  Put16(r, 0);
  WARREN_RETURN_IF_ERROR(Send(Finish(r)));
  std::string reply = WARREN_TRY(Reply("read the keyboard map"));
  keysyms_per_keycode_ = static_cast<uint8_t>(reply[1]);
  keysyms_.resize((reply.size() - 32) / 4);
  memcpy(keysyms_.data(), reply.data() + 32, keysyms_.size() * 4);
  if (keysyms_per_keycode_ == 0 || keysyms_.size() < size_t{count} * keysyms_per_keycode_)
    return Fail("read the keyboard map", "malformed reply");
  return Status::Ok();
}

Result<std::string> X11Connection::CaptureRgb(uint16_t y, uint16_t rows) {
  std::string r = Request(kGetImage, kZPixmap);
  Put32(r, root_);
  Put16(r, 0);
  Put16(r, y);
  Put16(r, width_);
  Put16(r, rows);
  Put32(r, 0xffffffff);
  WARREN_RETURN_IF_ERROR(Send(Finish(r)));
  std::string img = WARREN_TRY(Reply("capture the screen"));
  const size_t pixels = size_t{width_} * rows;
  if (img.size() < 32 + pixels * 4) return Fail("capture the screen", "short image");
  std::string rgb(pixels * 3, '\0');
  const unsigned char* in = reinterpret_cast<const unsigned char*>(img.data() + 32);
  char* out = rgb.data();
  // 24-bit TrueColor at 32 bits, least significant byte first: blue, green, red, unused.
  for (size_t i = 0; i < pixels; ++i, in += 4, out += 3) {
    out[0] = static_cast<char>(in[2]);
    out[1] = static_cast<char>(in[1]);
    out[2] = static_cast<char>(in[0]);
  }
  return rgb;
}

Status X11Connection::MovePointer(int x, int y) {
  std::string r = Request(xtest_opcode_, kXTestFakeInput);
  Put8(r, kMotionNotify);
  Put8(r, 0);  // absolute
  Put16(r, 0);
  Put32(r, 0);      // time: now
  Put32(r, root_);  // root
  Put32(r, 0);
  Put32(r, 0);
  Put16(r, static_cast<uint16_t>(static_cast<int16_t>(x)));
  Put16(r, static_cast<uint16_t>(static_cast<int16_t>(y)));
  Put32(r, 0);
  Put16(r, 0);
  Put8(r, 0);
  Put8(r, 0);  // device: the core pointer
  return Send(Finish(r));
}

Status X11Connection::Button(int button, bool press) {
  std::string r = Request(xtest_opcode_, kXTestFakeInput);
  Put8(r, press ? kButtonPress : kButtonRelease);
  Put8(r, static_cast<uint8_t>(button));
  r.append(30, '\0');
  return Send(Finish(r));
}

Status X11Connection::Key(uint8_t keycode, bool press) {
  std::string r = Request(xtest_opcode_, kXTestFakeInput);
  Put8(r, press ? kKeyPress : kKeyRelease);
  Put8(r, keycode);
  r.append(30, '\0');
  return Send(Finish(r));
}

Result<std::pair<uint8_t, bool>> X11Connection::KeycodeFor(uint32_t keysym) {
  const size_t per = keysyms_per_keycode_;
  const size_t count = size_t{max_keycode_} - min_keycode_ + 1;
  for (size_t shifted = 0; shifted < 2 && shifted < per; ++shifted)
    for (size_t k = 0; k < count; ++k)
      if (keysyms_[k * per + shifted] == keysym)
        return std::pair<uint8_t, bool>{static_cast<uint8_t>(min_keycode_ + k), shifted == 1};
  // No key has it: the last keycode with nothing on it gets it.
  for (size_t k = count; k-- > 0;) {
    bool empty = true;
    for (size_t i = 0; i < per; ++i) empty = empty && keysyms_[k * per + i] == 0;
    if (!empty) continue;
    std::string r = Request(kChangeKeyboardMapping, 1);
    Put8(r, static_cast<uint8_t>(min_keycode_ + k));
    Put8(r, static_cast<uint8_t>(per));
    Put16(r, 0);
    for (size_t i = 0; i < per; ++i) Put32(r, i < 2 ? keysym : 0);
    WARREN_RETURN_IF_ERROR(Send(Finish(r)));
    WARREN_RETURN_IF_ERROR(Sync());
    for (size_t i = 0; i < per; ++i) keysyms_[k * per + i] = i < 2 ? keysym : 0;
    return std::pair<uint8_t, bool>{static_cast<uint8_t>(min_keycode_ + k), false};
  }
  return Fail("type", "no free keycode for keysym " + std::to_string(keysym));
}

}  // namespace warren::agent
