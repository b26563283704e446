// warren-agent: PID 1 of every container sandbox.
//
// Started by the node from a sealed memfd with the control socket on fd 3. It first receives
// the setup message (layer mounts as fds), builds the root filesystem, pivots into it, and
// says ready; then it serves exec and file requests until the node closes the socket, and
// reaps every orphan in the sandbox. It never trusts anything inside the sandbox and holds no
// host secret.
#pragma once

#include <sys/types.h>

#include "base/unique_fd.h"

namespace warren::agent {

inline constexpr int kControlFd = 3;
inline constexpr int kSelfMemfd = 5;  // the memfd we were executed from; closed at start

int Run(UniqueFd listener = {}, pid_t relay_pid = 0);
// PID 1 of a microVM or VM (the kernel ran us as /init): see agent/vm_init.h, then Run().
int RunVm();
// Backend vm: the agent as a service of the image's own init, from the unit and setup PID 1
// left under /run (agent/vm_init.h); it opens the agent's port again and says `ready`.
int RunVmService(const char* setup_path);

}  // namespace warren::agent
