// Carries agent protocol messages over a byte stream.
//
// Inside a microVM the agent's channel is a virtio-serial port: a byte stream, with no message
// boundaries and no fd passing. Both ends keep the agent protocol's SOCK_SEQPACKET socket (so
// AgentConn and the agent's loop are the same for every backend) and run this relay between
// that socket and the stream, one on the host (QEMU's chardev socket) and one in the guest
// (/dev/vportNpM). On the stream each message is framed as: u32 little-endian length, then
// the message exactly as the packet socket carries it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace warren::agent {

// Runs until one side closes or fails, or `stop_fd` (if >= 0) turns readable. Both fds are
// switched to non-blocking. A frame longer than kMaxMessage is a protocol error (the peer
// across the stream is not trusted: in a VM the guest's root can write to the port).
// Returns Ok when a side closed cleanly or stop_fd fired.
//
// Reconnection (a node restarted and adopts a running VM): bytes in flight when the old node
// died may leave half a frame on either side. The adopting node therefore opens its session
// with kAdoptFrame; the guest's relay, seeing it anywhere in its input, drops what it held,
// starts a new session with the agent (which then waits for the node's `resume`) and answers
// with kSyncFrame, up to which the node skips its input (AwaitSync). A fresh session (create,
// restore) starts with kSyncFrame, a no-op between frames.
inline constexpr std::string_view kSyncFrame{"\0\0\0\0WARREN-SYNC1", 16};
inline constexpr std::string_view kAdoptFrame{"\0\0\0\0WARREN-ADOPT", 16};

struct RelayOptions {
  int stop_fd = -1;   // readable: stop
  int drain_fd = -1;  // read on the side and handed to on_drain (the host: the guest's console)
  std::function<void(std::string_view)> on_drain;
  std::string initial;  // stream bytes already read, to relay first
  // The guest: return kAborted-like Status(kConflict, "adopt") when kAdoptFrame arrives, with
  // what followed it in *leftover.
  bool watch_adopt = false;
  std::string* leftover = nullptr;
  // The stream is a virtio-serial port: end of file, EPIPE and POLLHUP mean its host side is
  // away for now (output meanwhile is dropped: the agent resends it on resume), not the end.
  bool stream_reconnects = false;
};
Status RelayFrames(int stream_fd, int packet_fd, const RelayOptions& opts = {});
bool IsAdoptRestart(const Status& st);

// Reads `stream_fd` until kSyncFrame and returns what came after it. Gives up when stop_fd
// turns readable or the stream ends (kUnavailable), or after `timeout_ms` (-1: never).
Result<std::string> AwaitSync(int stream_fd, int stop_fd, int timeout_ms);

// Frames one message for the stream (used by tests and by the node before a relay runs).
std::string FrameForStream(std::string_view message);

}  // namespace warren::agent
