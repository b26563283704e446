// PID 1 of a microVM: what the kernel and an init system would otherwise have done, before
// warren-agent serves the node the same way it does in a container.
//
// The initramfs the node builds (runtime/vm/guest_image.h) holds this binary as /init, the
// kernel modules a sandbox needs (virtio transport, block and console, EROFS, overlayfs) and
// their load order. VmInit mounts /proc, /sys and /dev, loads the modules, finds the
// virtio-serial port named kAgentPortName and relays the agent protocol between it and the
// usual SOCK_SEQPACKET control socket on kControlFd (see agent/frame_relay.h): one session per
// connection of the host side, each a fresh connection to the agent's listener, so a node
// that restarted is reconnected as in a container (the agent keeps its commands running and
// resends what the new node lacks). It then says
// `hello` and returns: the agent's Setup waits for the node's setup message from here on, and
// this is also where a template VM is snapshotted, so every restored VM resumes right there.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::agent {

inline constexpr const char* kAgentPortName = "warren.agent";
inline constexpr const char* kModuleOrderFile = "/lib/modules/warren.order";
// Loaded besides when the machine has a display device (PCI class 03: backend vm's screen).
inline constexpr const char* kDisplayModuleOrderFile = "/lib/modules/warren-display.order";
// Where the guest mounts cgroup2 for its commands' cgroup (inside the initramfs).
inline constexpr const char* kInitCgroupDir = "/run/warren-cgroup";
// The same hierarchy where systemd mounts it (backend vm, after the hand-over).
inline constexpr const char* kSystemCgroupDir = "/sys/fs/cgroup";
// Where the relay connects each session to the agent: in the initramfs, or in a full OS.
inline constexpr const char* kInitAgentSocket = "/run/warren-agent.sock";
inline constexpr const char* kServiceAgentSocket = "/run/warren/agent.sock";
inline constexpr const char* kVmSystemInit = "/sbin/init";

// On success fd kControlFd is the first session's connection and *listener the socket later
// sessions (a host that came back after the node restarted) connect through.
Status VmInit(UniqueFd* listener, pid_t* relay_pid);

// Finds the agent's virtio-serial port and starts the relay between it and a packet
// connection to us (fd kControlFd); later sessions connect through *listener, bound at
// `socket_path`. The relay's pid goes to *relay_pid.
Status OpenVmAgentChannel(const std::string& socket_path, UniqueFd* listener,
                          pid_t* relay_pid = nullptr);

// Backend vm: whether the sandbox's root (after the switch into it) boots systemd, the init
// that can start the agent as its service. Without it the VM runs with the agent as init.
bool ImageBootsSystemd();

// Backend vm (a full OS): after the switch to the sandbox's root, installs this binary as a
// systemd service under a fresh /run, with `setup_doc` (what it needs of the node's setup)
// beside it. Fails if the image does not boot systemd.
Status InstallVmAgentService(const std::string& setup_doc);
// A warm microVM (restored ahead of its sandbox, runtime/vm/microvm_backend.h) rehearses its
// setup while it waits: mounts the placeholder disk of slot 0 (an empty EROFS image) as a
// layer, builds an overlay root over it with /proc and /dev, execs a program and tears it all
// down. Under TCG each kernel path is translated on its first use in a QEMU process, and a
// restored VM's QEMU is new: this moves that cost off the sandbox's create.
Status RehearseVmSetup();
// The argument the rehearsal's exec of the agent gets (main returns at once).
inline constexpr const char* kWarmExecFlag = "--warm-exec";

// Ends our session (the service's agent opens the port again) and executes the image's init.
// Returns only if the exec failed.
void ExecVmSystemInit(pid_t relay_pid);

// In the guest, after a template restore: folds the node's fresh randomness into the kernel's
// pool and reseeds it (every VM restored from one template would otherwise share the
// template's random state), and sets the clock.
Status VmReseed(const std::string& seed_hex, int64_t now_ns);

// Detached EROFS mounts of the layer disks whose virtio serial numbers are `serials` (one
// per layer, top first). Drops whatever the block cache holds for each disk first: a restored
// VM's kernel probed the template's placeholder disks.
Result<std::vector<UniqueFd>> MountVmLayers(const std::vector<std::string>& serials);

// Mounts cgroup2 and makes the (limitless) commands group: done before `hello`.
Status PrepareVmCommandsCgroup();

// A cgroup for the commands with the sandbox's memory and pids limits; returns an fd open for
// writing on its cgroup.procs (how commands move themselves in, as in a container).
Result<UniqueFd> MakeVmCommandsCgroup(const std::string& cgroup_root, uint64_t memory_bytes,
                                      uint64_t pids);

// /proc, and /dev as devtmpfs with devpts and a /dev/shm, under `root`.
Status MountVmProcAndDev(const std::string& root);

// switch_root: the initramfs cannot be pivoted away from, so the new root is moved over it.
Status SwitchRootInto(const std::string& new_root);

}  // namespace warren::agent
