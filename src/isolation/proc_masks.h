// /proc and /sys for the sandbox. Child half.
//
// /proc is a new instance for the sandbox's PID namespace, with the paths runc masks
// (kernel memory, keys, timers) hidden behind /dev/null or an empty read-only directory, and the
// global knobs (/proc/sys, sysrq-trigger, ...) read-only. /sys is a read-only sysfs of the
// sandbox's own network namespace, with runc's masked sysfs paths hidden the same way.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

// Masked directories are read-only binds of one empty directory made in `scratch` (see
// devices.h), not a tmpfs each.
Status MountProc(const std::string& root, const std::string& scratch);
// `sysfs_fd`: a detached sysfs the node made (for a network namespace the sandbox does not
// own), attached instead of mounting one; -1 to mount our own. runc's masked sysfs paths
// (/sys/firmware, /sys/devices/virtual/powercap) get the same empty directory as /proc's.
Status MountSys(const std::string& root, int sysfs_fd, const std::string& scratch);

// What an fncall call's own fresh /proc still shows an unprivileged reader and a call must not
// see: per-interrupt counts (a side channel on whatever else runs on the host), the kernel's
// config, its symbols (addresses where kptr_restrict is 0) and, on older kernels, scheduler
// debug data and latency stats. Each gets /dev/null bound over it (absent ones are skipped). The
// rest of runc's list is root-only to begin with, and every mount is paid again by every call.
// Left readable: the `intr` and `softirq` totals of /proc/stat, which top, ps and psutil read.
// The same list is in runtime/fncall/zygote_lib.c and zygote.py (Python workers' set-up).
inline constexpr const char* kCallProcMasks[] = {"/proc/interrupts",  "/proc/softirqs",
                                                 "/proc/config.gz",   "/proc/kallsyms",
                                                 "/proc/sched_debug", "/proc/latency_stats"};

}  // namespace warren::isolation
