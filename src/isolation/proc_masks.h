// /proc and /sys for the sandbox. Child half.
//
// /proc is a new instance for the sandbox's PID namespace, with the paths runc masks
// (kernel memory, keys, timers) hidden behind /dev/null or an empty read-only tmpfs, and the
// global knobs (/proc/sys, sysrq-trigger, ...) read-only. /sys is a read-only sysfs of the
// sandbox's own network namespace.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

Status MountProc(const std::string& root);
Status MountSys(const std::string& root);

}  // namespace warren::isolation
