// The node <-> warren-agent wire protocol.
//
// One SOCK_SEQPACKET socket per sandbox; the kernel keeps message boundaries, so a message
// is simply: u32 little-endian header length, a JSON header, then raw payload bytes.
// Header field "t" is the message type; "id" correlates requests with replies.
//
//   node -> agent                          agent -> node
//   setup {hostname, disk_bytes, layers}   ready {} | setup_failed {error}
//     + SCM_RIGHTS: idmapped layer mounts, top layer first
//   exec {id, argv, env, cwd, timeout_ms,  out {id, s: "stdout"|"stderr"} + bytes
//         max_output, stdin_more} + stdin   exit {id, exit_code, signal, timed_out,
//   stdin {id, eof} + bytes                       stdout_truncated, stderr_truncated}
//   signal {id, sig}                       exec_failed {id, error}
//   put {id, path, mode, first, last}+data ok {id} | err {id, errno, error}
//   get {id, path, max}                    data {id, last} + bytes | err {...}
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::agent {

// Payload bytes per message; sized well under the default unix socket send buffer.
constexpr size_t kMaxPayload = 60 * 1024;
constexpr size_t kMaxMessage = kMaxPayload + 8 * 1024;

struct Message {
  nlohmann::json header;
  std::string payload;
};

std::string Encode(const Message& m);
Result<Message> Decode(std::string_view wire);

// fncall channel frames (node <-> a runner's dispatcher, dispatcher <-> native call worker; see
// runtime/fncall/zygote.py): u32 LE length of the rest, u32 LE header length, JSON header,
// payload. Unlike Message, a byte stream (pipes) carries them.
std::string EncodeFrame(const nlohmann::json& header, std::string_view payload = {});

// Blocking send/receive of one message on a SOCK_SEQPACKET socket. Recv returns a
// kUnavailable status on EOF (the peer closed).
Status Send(int fd, const Message& m);
Result<Message> Recv(int fd);
// Recv, giving up with kUnavailable after `timeout_ms` without a message; `what` names the
// wait in that error.
Result<Message> RecvWithin(int fd, int timeout_ms, const std::string& what);

}  // namespace warren::agent
