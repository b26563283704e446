// `warren-agent --call-dispatcher`: an fncall runner's dispatcher. The node runs it in the
// runner sandbox as one long channel command (argv[0] /proc/self/exe: the agent's own binary);
// its stdin and stdout are the node's channel (frames: u32 LE length of the rest, u32 LE header
// length, JSON header, payload).
//
// It holds every call's data and never forks a worker itself. Python calls run in workers
// cloned by the zygote, a python3 it starts with zygote.py (which the node sends, with the
// call's seccomp filter and warren-zygote.so) that holds nothing of any call; programs that are
// exec'd run in native workers (call_worker.h), cloned by the native forker (native_forker.h),
// which it forks before the first call reaches it for the same reason. Workers are made ahead
// of time (`prefork`), so a call pays for writing its request, its own run, and reading back
// its output and report.
//
// It was zygote.py's Python loop until it cost as much CPU per call as the C++ server in front
// of it (see docs/design.md, "fncall").
#pragma once

namespace warren::agent {

int CallDispatcherMain(int argc, char** argv);

}  // namespace warren::agent
