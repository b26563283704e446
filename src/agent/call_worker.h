// One fncall call's native worker, for programs that are exec'd (C, C++, shell, ...): pid 1 of
// the call's own namespaces, cloned by the native forker (native_forker.h) straight from its
// memory, which holds nothing of any call. No binary is exec'd for it and no process stands
// between it and the dispatcher: the dispatcher's pidfd names pid 1, so the call is over (every
// process of it gone) when that pidfd says so.
//
// Same wire protocol as zygote.py's Python workers (see there): fds 0/1/2 the program's stdio,
// 3 the request (a frame: header {argv, env, files, limits, collect, cwd}, the files' bytes), 4
// the report (a frame: {exit_code, signal, cpu_ms, maxrss_kb, files} and the files' bytes, or
// {error}). SIGUSR1 ends the program, which is still reported with its usage.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace warren::agent {

struct CallWorkerParams {
  uid_t uid = 0;             // the call's own uid (and gid)
  uint64_t tmp_bytes = 0;    // its /tmp
  unsigned setup_flags = 0;  // WARREN_CALL_* (isolation/call_setup.h)
  unsigned long root_flags = 0;
  std::string_view seccomp;  // the call's filter (BPF), applied last
  // The forker's sample run (native_forker.cc), not a call: after its report, pid 1 lists on
  // the report pipe the pages it wrote (sys/copy_at_clone.h), as a u64 count and the addresses.
  bool sample = false;
};

// Runs in the freshly cloned pid 1, its fds already placed: the call's isolation
// (isolation/call_setup.h), then waits for the request, runs the program and reports.
[[noreturn]] void RunCallWorker(const CallWorkerParams& params);

}  // namespace warren::agent
