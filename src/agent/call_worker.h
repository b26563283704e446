// `warren-agent --call-worker`: one fncall call's worker for programs that are exec'd (C, C++,
// shell, ...): spawned by the runner's dispatcher (vfork, nothing of it copied), it makes the
// call's namespaces and runs the program in them, all in this small static binary, where a
// forked Python worker would pay for every page it touches. Same wire protocol as zygote.py's
// Python workers (see there): fds 0/1/2 the program's stdio, 3 the request, 4 the report,
// 5 the call's seccomp filter, 6 (if argv says so) a net namespace to join; argv: UID
// TMP_BYTES FLAGS ROOT_MOUNT_FLAGS [NETNS_FD, -1: make a new one].
#pragma once

namespace warren::agent {

// FLAGS, the set-up flags (the same in zygote_lib.c's WZ_*): / is a shared mount, to be made
// private first; the image has /dev/shm, which gets a tmpfs of the call's own.
constexpr unsigned kCallMakePrivate = 1, kCallHasShm = 2;

int CallWorkerMain(int argc, char** argv);

}  // namespace warren::agent
