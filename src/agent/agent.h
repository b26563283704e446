// warren-agent: PID 1 of every container sandbox.
//
// Started by the node from its agent file (runtime/container/agent_binary.h) with the control
// socket on fd 3. It first receives the setup message (layer mounts as fds), builds the root
// filesystem, pivots into it, and says ready; then it serves exec and file requests until the node
// closes the socket, and reaps every orphan in the sandbox. It never trusts anything inside the
// sandbox and holds no host secret.
#pragma once

#include <sys/types.h>

#include "base/unique_fd.h"

namespace warren::agent {

inline constexpr int kControlFd = 3;
// The file we were executed from (runtime/container/agent_binary.h); closed at start.
inline constexpr int kSelfExeFd = 5;
// O_PATH fds kept for the node: the sandbox's staging tmpfs (holding the overlay's `upper` and
// /dev/shm's `shm`) at 1000, and its layer clones, top first, from 1001 on (after the pivot
// they are detached: no path leads to them, inside the sandbox or out). The node (host root)
// opens /proc/<agent>/fd/N to read what the occupant changed and to apply the filesystem
// policy (runtime/container/fs_guard.h). Commands never inherit them (close_range).
inline constexpr int kStagingDirFd = 1000;
inline constexpr int kFirstLayerFd = 1001;
inline constexpr int kMaxKeptLayers = 128;

int Run(UniqueFd listener = {}, pid_t relay_pid = 0);
// PID 1 of a microVM or VM (the kernel ran us as /init): see agent/vm_init.h, then Run().
int RunVm();
// Backend vm: the agent as a service of the image's own init, from the unit and setup PID 1
// left under /run (agent/vm_init.h); it opens the agent's port again and says `ready`.
int RunVmService(const char* setup_path);

}  // namespace warren::agent
