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
// Returns Ok when a side closed cleanly or stop_fd fired. `drain_fd`, if >= 0, is read on the
// side and handed to `on_drain` (the host uses it for the guest's console) until it closes.
Status RelayFrames(int stream_fd, int packet_fd, int stop_fd = -1, int drain_fd = -1,
                   const std::function<void(std::string_view)>& on_drain = {});

// Frames one message for the stream (used by tests and by the node before a relay runs).
std::string FrameForStream(std::string_view message);

}  // namespace warren::agent
