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

// An fncall call's /proc masks are isolation/call_setup.h's (a fresh /proc of its own, and fewer).

}  // namespace warren::isolation
