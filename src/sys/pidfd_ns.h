// A process's namespaces through its pidfd (PIDFD_GET_*_NAMESPACE, Linux 6.11): race-free
// where /proc/PID/ns/* is not (by the time it is opened, PID may name another process).
#pragma once

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::sys {

// The network namespace of the process behind `pidfd` (it must still be alive).
Result<UniqueFd> OpenNetnsOfPidfd(int pidfd);

}  // namespace warren::sys
