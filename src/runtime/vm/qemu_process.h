// Starts QEMU jailed, as Firecracker's jailer does for its VMM: the VMM runs the guest's
// device emulation and must be assumed compromised as soon as the guest runs.
//
// The process gets: its own unprivileged host uid/gid (a sandbox uid slot) and no
// capabilities; new mount, pid, ipc and uts namespaces with the host's /run, /tmp, /var, /home
// and /root hidden under empty tmpfs and a /proc of its own; the sandbox's network namespace
// (or a new empty one); the sandbox's cgroup (memory, cpu, pids); no_new_privs, no core dumps;
// QEMU's own seccomp sandbox (-sandbox on, no spawning, no privilege changes). It opens no host
// path of ours: the kernel, initramfs, layer disks, snapshot and channels are fds passed in.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::runtime::vm {

struct QemuLaunch {
  std::string binary = "qemu-system-x86_64";
  std::vector<std::string> args;  // without argv[0]
  // fds[i] becomes fd kFirstFd + i in QEMU; args refer to them by that number.
  std::vector<int> fds;
  uint32_t uid = 0, gid = 0;  // must be non-zero
  int netns_fd = -1;          // -1: a new network namespace with nothing in it
  int cgroup_v2_fd = -1;      // CLONE_INTO_CGROUP, when the host has cgroup2
  // >= 0: the child makes a TAP device `tap0` in its network namespace (where the VM's NIC
  // goes) and puts its fd at this number; with bridge_eth0, also a bridge joining it to the
  // namespace's eth0 (the sandbox's link to the node's bridge).
  int tap_fd = -1;
  bool bridge_eth0 = false;
};

inline constexpr int kFirstFd = 3;

struct QemuProcess {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd console;      // read end of QEMU's stdout+stderr (the guest's serial console)
  bool adopted = false;  // started by an earlier run of the node: not our child
};

// Clones the jailed child and returns once it is ready to exec; `before_exec` runs in the
// parent while the child waits (attach to v1 cgroups), then the child execs QEMU. A failure
// inside the child before exec is reported with its errno.
Result<QemuProcess> SpawnJailedQemu(const QemuLaunch& launch,
                                    const std::function<Status(pid_t)>& before_exec);

// Kills QEMU (and with it its pid namespace) and reaps it.
void KillQemu(QemuProcess& p);

}  // namespace warren::runtime::vm
