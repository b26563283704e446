// The native forker: where an fncall runner's native workers (call_worker.h) come from. A child
// of the dispatcher, forked before the first call reached it, so that nothing of any call is in
// its memory and so in no worker's; it clones each worker straight into the call's fresh mount,
// pid and uts namespaces as pid 1, and into a net and an IPC namespace it keeps for calls
// (call_ns_pool.h: ones an earlier call left as new, or new). Pid 1 runs in
// the forker's own memory (CLONE_VM, on a stack and with a thread block of its own: see
// call_worker.h): its clone copies no page tables and its end tears none down, which on a
// guest whose page tables the host shadows cost more than the rest of pid 1's life.
//
// It replaced a `warren-agent --call-worker` posix_spawn'd per call: the exec of the 28 MB
// static agent (its page faults, and glibc's start-up, whose CPUID probes are VM exits on a
// guest), its unshare and a fork of itself for pid 1 cost more than the program each call ran
// (see docs/design.md, "fncall").
//
// Wire: one SOCK_SEQPACKET datagram each way. Request: a ForkRequest with the worker's five
// pipe ends (its request and stdin, which it reads; its stdout, stderr and report, which it
// writes). Answer, in order: a ForkAnswer, with pid 1's
// pidfd if `error` is 0. The forker does not wait for its workers (the kernel reaps them); the
// dispatcher sees each one end through its pidfd, when every process of its call is gone.
#pragma once

#include <cstdint>
#include <string>

namespace warren::agent {

struct ForkRequest {
  uint32_t uid = 0;
};

struct ForkAnswer {
  int32_t pid = 0;    // in the dispatcher's pid namespace
  int32_t error = 0;  // errno of the clone, or 0
};

struct NativeForkerConfig {
  uint64_t tmp_bytes = 0;
  unsigned setup_flags = 0;  // WARREN_CALL_* (isolation/call_setup.h)
  unsigned long root_flags = 0;
  std::string seccomp;  // the calls' filter (BPF)
};

// Forks the forker and waits until it serves. Returns the dispatcher's end of its socket
// (CLOEXEC), or -1 with errno, and in `how` how it makes pid 1 (sharing its memory, or a copy
// of it and why). The dispatcher must be single-threaded and hold no call's data yet.
int StartNativeForker(const NativeForkerConfig& cfg, std::string* how);

}  // namespace warren::agent
