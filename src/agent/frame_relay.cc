#include "agent/frame_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "agent/protocol.h"

namespace warren::agent {
namespace {

// How much framed data toward the stream we buffer before we stop reading the packet socket
// (the stream's reader is slow or gone: backpressure, not memory growth).
constexpr size_t kMaxPendingToStream = 4 * kMaxMessage;

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

uint32_t ReadLe32(const char* p) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return n;
}

}  // namespace

bool IsAdoptRestart(const Status& st) {
  return st.code() == Code::kConflict && st.ToString().find("adopt") != std::string::npos;
}

std::string FrameForStream(std::string_view message) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(message.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out.append(message);
  return out;
}

Result<std::string> AwaitSync(int stream_fd, int stop_fd, int timeout_ms) {
  std::string buf;
  for (;;) {
    size_t at = buf.find(kSyncFrame);
    if (at != std::string::npos) return buf.substr(at + kSyncFrame.size());
    // Keep only what could be the start of a marker split across reads.
    if (buf.size() > kSyncFrame.size()) buf.erase(0, buf.size() - kSyncFrame.size());
    pollfd p[2] = {{stream_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int r = poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("poll", "agent stream");
    if (r == 0)
      return Status(Code::kUnavailable, "wait for the agent's sync", "agent stream", "timed out");
    if (p[1].revents)
      return Status(Code::kUnavailable, "wait for the agent's sync", "agent stream", "stopped");
    if (!(p[0].revents & POLLIN)) {
      if (p[0].revents & (POLLHUP | POLLERR))
        return Status(Code::kUnavailable, "wait for the agent's sync", "agent stream", "closed");
      continue;
    }
    char tmp[4096];
    ssize_t n = read(stream_fd, tmp, sizeof tmp);
    if (n == 0)
      return Status(Code::kUnavailable, "wait for the agent's sync", "agent stream", "closed");
    if (n < 0 && errno != EAGAIN && errno != EINTR) return ErrnoStatus("read", "agent stream");
    if (n > 0) buf.append(tmp, static_cast<size_t>(n));
  }
}

Status RelayFrames(int stream_fd, int packet_fd, const RelayOptions& opts) {
  const int stop_fd = opts.stop_fd;
  int drain_fd = opts.drain_fd;
  const auto& on_drain = opts.on_drain;
  SetNonBlocking(stream_fd);
  SetNonBlocking(packet_fd);
  std::string from_stream = opts.initial;  // bytes read from the stream, not yet a whole frame
  std::string to_stream;                   // framed messages not yet written to the stream
  size_t to_stream_off = 0;
  std::string packet(kMaxMessage, '\0');
  bool packet_blocked = false;  // a whole frame waits for room in the packet socket
  for (;;) {
    // Deliver whole frames from the stream to the packet socket.
    while (from_stream.size() >= 4) {
      const uint32_t n = ReadLe32(from_stream.data());
      if (n == 0) {  // a sync between frames: nothing to deliver
        if (from_stream.size() < kSyncFrame.size()) break;
        if (from_stream.compare(0, kSyncFrame.size(), kSyncFrame) != 0 &&
            from_stream.compare(0, kAdoptFrame.size(), kAdoptFrame) != 0)
          return Invalid("malformed sync frame", "agent stream");
        from_stream.erase(0, kSyncFrame.size());
        continue;
      }
      if (n > kMaxMessage)
        return Invalid("frame of " + std::to_string(n) + " bytes", "agent stream");
      if (from_stream.size() < 4 + n) break;
      ssize_t w = send(packet_fd, from_stream.data() + 4, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        packet_blocked = true;
        break;
      }
      if (w < 0)
        return errno == EPIPE || errno == ECONNRESET ? Status::Ok()
                                                     : ErrnoStatus("send", "agent packet socket");
      packet_blocked = false;
      from_stream.erase(0, 4 + n);
    }
    if (from_stream.size() < 4 || from_stream.size() < 4 + ReadLe32(from_stream.data()) ||
        ReadLe32(from_stream.data()) == 0)
      packet_blocked = false;

    pollfd p[4] = {};
    p[0].fd = stream_fd;
    // Read the stream only while what we hold is less than one more frame (bounded memory).
    p[0].events = (from_stream.size() < kMaxMessage + 4 && !packet_blocked ? POLLIN : 0) |
                  (to_stream_off < to_stream.size() ? POLLOUT : 0);
    p[1].fd = packet_fd;
    p[1].events = (to_stream.size() - to_stream_off < kMaxPendingToStream ? POLLIN : 0) |
                  (packet_blocked ? POLLOUT : 0);
    p[2].fd = stop_fd;
    p[2].events = POLLIN;
    p[3].fd = drain_fd;
    p[3].events = POLLIN;
    int r = poll(p, 4, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll", "agent relay");
    }
    if (stop_fd >= 0 && p[2].revents) return Status::Ok();
    if (drain_fd >= 0 && p[3].revents) {
      char buf[4096];
      ssize_t n = read(drain_fd, buf, sizeof buf);
      if (n > 0 && on_drain) on_drain(std::string_view(buf, static_cast<size_t>(n)));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) drain_fd = -1;
    }
    if (p[0].revents & POLLIN) {
      char buf[65536];
      ssize_t n = read(stream_fd, buf, sizeof buf);
      if (n == 0 && opts.stream_reconnects) {
        to_stream.clear(), to_stream_off = 0;
        usleep(10000);
        continue;
      }
      if (n == 0) return Status::Ok();
      if (n < 0 && errno != EAGAIN && errno != EINTR) return ErrnoStatus("read", "agent stream");
      if (n > 0) from_stream.append(buf, static_cast<size_t>(n));
      // An adopting node's first bytes, wherever they land (after half a frame of the old
      // session, say): start over from just after them.
      if (opts.watch_adopt) {
        size_t at = from_stream.find(kAdoptFrame);
        if (at != std::string::npos) {
          if (opts.leftover) *opts.leftover = from_stream.substr(at + kAdoptFrame.size());
          return Status(Code::kConflict, "relay", "agent stream", "adopt");
        }
      }
    } else if (p[0].revents & POLLERR) {
      return Status(Code::kUnavailable, "relay", "agent stream", "stream error");
    } else if (p[0].revents & POLLHUP) {
      // A virtio-serial port reports POLLHUP while its host side is not connected (a socket
      // at EOF reports POLLIN too, handled above).
      if (opts.stream_reconnects) to_stream.clear(), to_stream_off = 0;
      usleep(10000);
    }
    if (p[0].revents & POLLOUT) {
      ssize_t n =
          write(stream_fd, to_stream.data() + to_stream_off, to_stream.size() - to_stream_off);
      if (n < 0 && errno == EPIPE && opts.stream_reconnects) {
        to_stream.clear(), to_stream_off = 0;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return errno == EPIPE || errno == ECONNRESET ? Status::Ok()
                                                     : ErrnoStatus("write", "agent stream");
      }
      if (n > 0) to_stream_off += static_cast<size_t>(n);
      if (to_stream_off == to_stream.size()) to_stream.clear(), to_stream_off = 0;
    }
    if (p[1].revents & POLLIN) {
      ssize_t n = recv(packet_fd, packet.data(), packet.size(), MSG_DONTWAIT);
      if (n == 0) return Status::Ok();
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        return ErrnoStatus("recv", "agent packet socket");
      if (n > 0) {
        if (to_stream_off > 0 && to_stream_off == to_stream.size())
          to_stream.clear(), to_stream_off = 0;
        to_stream += FrameForStream(std::string_view(packet.data(), static_cast<size_t>(n)));
      }
    } else if (p[1].revents & (POLLHUP | POLLERR)) {
      return Status::Ok();
    }
  }
}

}  // namespace warren::agent
