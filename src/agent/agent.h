// warren-agent: PID 1 of every container sandbox.
//
// Started by the node from a sealed memfd with the control socket on fd 3. It first receives
// the setup message (layer mounts as fds), builds the root filesystem, pivots into it, and
// says ready; then it serves exec and file requests until the node closes the socket, and
// reaps every orphan in the sandbox. It never trusts anything inside the sandbox and holds no
// host secret.
#pragma once

#include "base/unique_fd.h"

namespace warren::agent {

inline constexpr int kControlFd = 3;
inline constexpr int kSelfMemfd = 5;  // the memfd we were executed from; closed at start

int Run(UniqueFd listener = {});
// PID 1 of a microVM (the kernel ran us as /init): see agent/vm_init.h, then Run().
int RunVm();

}  // namespace warren::agent
