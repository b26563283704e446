// `warren-agent --call-worker`: one fncall call's worker for programs that are exec'd (C, C++,
// shell, ...): spawned by the runner's dispatcher (vfork, nothing of it copied), it makes the
// call's namespaces and runs the program in them, all in this small static binary, where a
// forked Python worker would pay for every page it touches. Same wire protocol as zygote.py's
// Python workers (see there): fds 0/1/2 the program's stdio, 3 the request, 4 the report,
// 5 the call's seccomp filter, 6 (if argv says so) a net namespace to join; argv: UID
// TMP_BYTES FLAGS (WARREN_CALL_* of isolation/call_setup.h) ROOT_MOUNT_FLAGS [NETNS_FD, -1: make a
// new one].
#pragma once

namespace warren::agent {

int CallWorkerMain(int argc, char** argv);

}  // namespace warren::agent
