// One fncall call's native worker, for programs that are exec'd (C, C++, shell, ...): pid 1 of
// the call's own namespaces, cloned by the native forker (native_forker.h). No binary is exec'd
// for it and no process stands between it and the dispatcher: the dispatcher's pidfd names pid
// 1, so the call is over (every process of it gone) when that pidfd says so.
//
// Pid 1 runs in the forker's memory (CLONE_VM), on a stack and with a thread block of its own,
// so it allocates nothing: no heap (the forker's, used by the forker meanwhile without locks),
// no globals it writes. What it needs room for (the request's strings, the report) is in
// `room`, which the forker gives it for its life alone.
//
// Same wire protocol as zygote.py's Python workers (see there) but for the request: fds 0/1/2
// the program's stdio, 3 the request (agent/native_request.h), 4 the report (a frame:
// {exit_code, signal, cpu_ms, maxrss_kb, files} and the files' bytes, or {error}). SIGUSR1 ends
// the program (and everything it started), which is still reported with its usage.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace warren::agent {

struct CallWorkerParams {
  uid_t uid = 0;             // the call's own uid (and gid)
  uint64_t tmp_bytes = 0;    // its /tmp
  unsigned setup_flags = 0;  // WARREN_CALL_* (isolation/call_setup.h)
  unsigned long root_flags = 0;
  std::string_view seccomp;  // the call's filter (BPF), applied last
  char* room = nullptr;      // kCallWorkerRoom bytes, this pid 1's alone
  // How much of it pid 1 has used, set before it uses more: the forker gives back what a large
  // request used (madvise) before the room's next pid 1, and only then.
  volatile size_t* room_used = nullptr;
  char* spawn_stack = nullptr;  // kCallWorkerSpawnStack bytes: the program's, until its exec
};

// The room a request needs at most (native_request.h's bounds), and some for the report.
inline constexpr size_t kCallWorkerRoom = size_t{8} << 20;
inline constexpr size_t kCallWorkerSpawnStack = size_t{64} << 10;

// Pid 1's report of a step that failed before the call's own set-up (its report pipe already
// on fd 4): {"error": "worker setup: WHAT: STRERROR(err)"}. Allocates nothing.
[[noreturn]] void CallWorkerSetupFailed(const char* what, int err);

// Runs in the freshly cloned pid 1, its fds already placed: the call's isolation
// (isolation/call_setup.h), then waits for the request, runs the program and reports.
[[noreturn]] void RunCallWorker(const CallWorkerParams& params);

}  // namespace warren::agent
