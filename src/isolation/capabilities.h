// Capabilities, child half: what a command in a sandbox keeps. Root inside holds capabilities
// only over the sandbox's own namespaces, but several still open kernel surface (SYS_ADMIN,
// NET_ADMIN, NET_RAW, MKNOD, SYS_PTRACE — the last would let the occupant read the agent).
// The kept set is Docker's default minus NET_RAW and MKNOD.
#pragma once

#include "base/status.h"

namespace warren::isolation {

// Drops every other capability from the bounding set and from the inheritable, permitted
// and effective sets, and clears the ambient set. Called in the exec child before execve.
Status RestrictCapabilities();
// The same without allocating (for a vfork-style child that shares the agent's memory): 0 on
// success, else which step failed (1..64: dropping capability N-1; 100 ambient; 101 capget;
// 102 capset) with errno set.
// `chroot`: keep CAP_SYS_CHROOT. A microVM's commands lose it: their root is a chroot into the
// overlay (agent/vm_init.cc, SwitchRootInto) over the initramfs, which the classic
// chroot-and-climb escape would reach (the writable layer's raw files, the commands' cgroup).
// `bounding` false: the bounding set was narrowed already (NarrowBoundingSet, by the process
// this child came from), which saves a system call per dropped capability.
int RestrictCapabilitiesRaw(bool chroot = true, bool bounding = true);

// Only the bounding set, for a process that starts every command (the agent, as it seals the
// sandbox): what no command it starts can ever hold. It keeps its own capabilities; the
// bounding set limits only what an execve gives.
Status NarrowBoundingSet(bool chroot = true);

// The kept set as a mask (bit N = capability N).
uint64_t KeptCapabilities(bool chroot = true);

}  // namespace warren::isolation
