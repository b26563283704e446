// The VNC bridge's RFB server (cli/rfb_server.h) against a client written out here from RFC
// 6143: the handshake, a pixel format of the client's, updates and input messages.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "cli/rfb_server.h"

namespace warren::cli {
namespace {

std::string ReadN(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, out.data() + got, n - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

void WriteS(int fd, const std::string& s) {
  ASSERT_EQ(write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
}

TEST(RfbPixels, TrueColourFormatsOfTheClients) {
  const uint8_t rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255};  // 4 pixels, 2x2
  RfbPixelFormat bgrx;  // the default: 32 bits, little-endian, red at 16
  std::string px = EncodePixels(rgb, 2, 0, 0, 2, 2, bgrx);
  ASSERT_EQ(px.size(), 16u);
  EXPECT_EQ(px.substr(0, 4), std::string("\x00\x00\xff\x00", 4));  // red
  EXPECT_EQ(px.substr(8, 4), std::string("\xff\x00\x00\x00", 4));  // blue
  RfbPixelFormat rgb565{16, 16, true, true, 31, 63, 31, 11, 5, 0};
  px = EncodePixels(rgb, 2, 1, 1, 1, 1, rgb565);  // the white pixel only
  EXPECT_EQ(px, std::string("\xff\xff", 2));
  px = EncodePixels(rgb, 2, 1, 0, 1, 1, rgb565);  // green, big-endian
  EXPECT_EQ(px, std::string("\x07\xe0", 2));
  RfbPixelFormat bgr233{8, 8, false, true, 7, 7, 3, 0, 3, 6};
  EXPECT_EQ(EncodePixels(rgb, 2, 0, 1, 1, 1, bgr233), std::string("\xc0", 1));  // blue
}

TEST(RfbSession, HandshakeFormatUpdateAndInput) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  RfbSession server{UniqueFd(sv[0])};
  UniqueFd client(sv[1]);
  std::thread viewer([&] {
    EXPECT_EQ(ReadN(client.get(), 12), "RFB 003.008\n");
    WriteS(client.get(), "RFB 003.008\n");
    EXPECT_EQ(ReadN(client.get(), 2), std::string("\x01\x01", 2));  // one type: None
    WriteS(client.get(), std::string("\x01", 1));
    EXPECT_EQ(ReadN(client.get(), 4), std::string(4, '\0'));  // security result OK
    WriteS(client.get(), std::string("\x01", 1));             // shared
    std::string init = ReadN(client.get(), 24);
    EXPECT_EQ(init.substr(0, 4), std::string("\x00\x02\x00\x01", 4));  // 2x1
    EXPECT_EQ(init[4], 32);                                            // bits per pixel
    EXPECT_EQ(ReadN(client.get(), 4), "demo");
    // SetPixelFormat: 16-bit 565 big-endian; SetEncodings [Raw]; an update request; a
    // pointer at (1, 0) with the left button; a key press of 'a'.
    WriteS(client.get(),
           std::string("\x00\0\0\0\x10\x10\x01\x01\x00\x1f\x00\x3f\x00\x1f\x0b\x05\x00\0\0\0", 20));
    WriteS(client.get(), std::string("\x02\0\x00\x01\x00\x00\x00\x00", 8));
    WriteS(client.get(), std::string("\x03\x00\x00\x00\x00\x00\x00\x02\x00\x01", 10));
    WriteS(client.get(), std::string("\x05\x01\x00\x01\x00\x00", 6));
    WriteS(client.get(), std::string("\x04\x01\0\0\x00\x00\x00\x61", 8));
    // The update: header, one rect 2x1 Raw, 2 pixels of 2 bytes.
    std::string upd = ReadN(client.get(), 4 + 12 + 4);
    EXPECT_EQ(upd.substr(0, 4), std::string("\x00\x00\x00\x01", 4));
    EXPECT_EQ(upd.substr(4, 12), std::string("\0\0\0\0\0\x02\0\x01\0\0\0\0", 12));
    EXPECT_EQ(upd.substr(16), std::string("\xf8\x00\xff\xff", 4));  // red, white
  });
  ASSERT_TRUE(server.Handshake(2, 1, "demo").ok());
  using K = RfbClientMessage::Kind;
  EXPECT_EQ(server.Read()->kind, K::kOther);  // pixel format, taken
  EXPECT_EQ(server.Read()->kind, K::kOther);  // encodings
  auto req = server.Read();
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(req->kind, K::kUpdateRequest);
  EXPECT_FALSE(req->incremental);
  EXPECT_EQ(req->w, 2);
  auto ptr = server.Read();
  EXPECT_EQ(ptr->kind, K::kPointer);
  EXPECT_EQ(ptr->buttons, 1);
  EXPECT_EQ(ptr->x, 1);
  auto key = server.Read();
  EXPECT_EQ(key->kind, K::kKey);
  EXPECT_TRUE(key->down);
  EXPECT_EQ(key->keysym, 0x61u);
  const uint8_t screen[] = {255, 0, 0, 255, 255, 255};
  ASSERT_TRUE(server.SendRect(screen, 2, 0, 0, 2, 1).ok());
  viewer.join();
}

TEST(RfbSession, ColourMapFormatsAreRefused) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  RfbSession server{UniqueFd(sv[0])};
  UniqueFd client(sv[1]);
  // Straight to a SetPixelFormat with true-colour off (no handshake needed to read it).
  WriteS(client.get(), std::string("\x00\0\0\0\x08\x08\x00\x00\0\0\0\0\0\0\0\0\0\0\0\0", 20));
  auto m = server.Read();
  EXPECT_EQ(m.status().code(), Code::kInvalid);
  // True colour, but red shifted past the pixel (a shift of 30 for 8 bits in 32), and a
  // maximum that is not 2^n-1: both would overflow the encoder.
  WriteS(client.get(),
         std::string("\x00\0\0\0\x20\x18\x00\x01\x00\xff\x00\xff\x00\xff\x1e\x08\x00\0\0\0", 20));
  EXPECT_EQ(server.Read().status().code(), Code::kInvalid);
  WriteS(client.get(),
         std::string("\x00\0\0\0\x20\x18\x00\x01\x00\xfe\x00\xff\x00\xff\x10\x08\x00\0\0\0", 20));
  EXPECT_EQ(server.Read().status().code(), Code::kInvalid);
}

}  // namespace
}  // namespace warren::cli
