#include "agent/protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>

namespace warren::agent {

std::string Encode(const Message& m) {
  std::string h = m.header.dump();
  std::string out;
  out.resize(4);
  uint32_t n = static_cast<uint32_t>(h.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += h;
  out += m.payload;
  return out;
}

Result<Message> Decode(std::string_view wire) {
  if (wire.size() < 4) return Invalid("short message", "agent protocol");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(wire[i])) << (8 * i);
  if (n > wire.size() - 4) return Invalid("header length beyond message", "agent protocol");
  Message m;
  m.header = nlohmann::json::parse(wire.substr(4, n), nullptr, /*allow_exceptions=*/false);
  if (m.header.is_discarded() || !m.header.is_object() || !m.header.contains("t"))
    return Invalid("malformed header", "agent protocol");
  m.payload.assign(wire.substr(4 + n));
  return m;
}

Status Send(int fd, const Message& m) {
  std::string wire = Encode(m);
  if (wire.size() > kMaxMessage) return Invalid("message too large", "agent protocol");
  for (;;) {
    ssize_t n = send(fd, wire.data(), wire.size(), MSG_NOSIGNAL);
    if (n >= 0) return Status::Ok();
    if (errno != EINTR) return ErrnoStatus("send", "agent socket");
  }
}

Result<Message> Recv(int fd) {
  // One buffer per thread, allocated once and never zeroed: a fresh zeroed 68 KiB per
  // message showed up as the agent's top user-space cost on the exec path, and untouched
  // pages cost no memory (an idle agent has only ever received small messages).
  thread_local std::unique_ptr<char[]> buf(new char[kMaxMessage]);
  ssize_t n;
  do {
    n = recv(fd, buf.get(), kMaxMessage, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("recv", "agent socket");
  if (n == 0) return Status(Code::kUnavailable, "recv", "agent socket", "peer closed");
  return Decode(std::string_view(buf.get(), static_cast<size_t>(n)));
}

Result<Message> RecvWithin(int fd, int timeout_ms, const std::string& what) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Status(Code::kUnavailable, what, "agent", "timed out");
  if (n < 0) return ErrnoStatus("poll", "agent socket");
  return Recv(fd);
}

std::string EncodeFrame(const nlohmann::json& header, std::string_view payload) {
  const std::string h = header.dump();
  const uint32_t total = static_cast<uint32_t>(4 + h.size() + payload.size());
  const uint32_t hlen = static_cast<uint32_t>(h.size());
  std::string out(8, '\0');
  memcpy(out.data(), &total, 4);  // little-endian hosts only, like the rest of the protocol
  memcpy(out.data() + 4, &hlen, 4);
  out += h;
  out.append(payload);
  return out;
}

}  // namespace warren::agent
