// The node <-> warren-agent wire protocol.
//
// One SOCK_SEQPACKET socket per sandbox; the kernel keeps message boundaries, so a message
// is simply: u32 little-endian header length, a JSON header, then raw payload bytes.
// Header field "t" is the message type; "id" correlates requests with replies.
//
//   node -> agent                              agent -> node
//   setup (agent/setup_messages.h: typed,      ready {setup_ms, landlock_abi, init}
//     strictly parsed; its fds go in named       | setup_failed {error}
//     slots: layers, sysfs, commands'
//     cgroup.procs, listening socket)
//     + payload: the seccomp program (BPF), or none
//     a microVM's setup has `vm` {full_os, layer_serials, memory_bytes, pids, seed, now_ns,
//     net} and carries no fds (its layers are disks of the guest);
//     a warm microVM gets `warmup` first        warm {ms, error}
//   assign {hostname, env, nofile} (typed)     assigned {} | err {...}   (a warm sandbox claimed)
//   exec {id, argv, env, env_defaults, cwd,    out {id, s: "stdout"|"stderr"} + bytes
//         timeout_ms, max_output, stdin,       exit {id, exit_code, signal, timed_out,
//         stdin_more, channel} + stdin              stdout_truncated, stderr_truncated}
//   stdin {id, eof} + bytes                    exec_failed {id, error}
//     (exec's `tty` {rows, cols}: stdin, stdout and stderr are a pty slave; its output is
//     all "stdout")
//   input {id, exec, eof} + bytes              ok {id} | err {id, code, error}  (a client's
//     input, acknowledged; refused with code quota while 1 MiB waits unread; a terminal's
//     eof is its ^D)
//   resize {id, rows, cols}                    (none: the kernel tells the command, SIGWINCH)
//   signal {id, sig}
//   put {id, path, mode, first, last}+data     ok {id} | err {id, errno, code, error}
//   get {id, path, max}                        data {id, last} + bytes | err {...}
//   fs_policy {id, read_only, writable}        ok {id, flags_changed, severed} | err {...}
//     (a microVM's filesystem policy, applied by its agent: isolation/fs_apply.h)
//   fs_changes {id, under, limit}              data {id, last} + the report | err {...}
//     (a microVM's tamper report: agent/fs_helper.h has its encoding)
//   ping {id}                                  pong {id}
//   resume {execs: {ID: [out, err]}}           resumed {execs: [...]}, then what it missed
//     (a node that restarted: see docs/design.md, restart safety)
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
