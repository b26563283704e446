// The container backend: namespaces + idmapped EROFS layers under overlayfs + cgroups, with
// warren-agent as PID 1. See docs/design.md, "Making a container sandbox".
#pragma once

#include "image/erofs_mount_cache.h"
#include "isolation/uid_allocator.h"
#include "runtime/backend.h"
#include "runtime/create_faults.h"

namespace warren::runtime {

class ContainerBackend : public Backend {
 public:
  // `mounts` and `uids` must outlive the backend and every instance it makes.
  // `cgroup_parent` names this node's cgroup parent directory.
  ContainerBackend(UniqueFd agent_exe_fd, image::ErofsMountCache* mounts,
                   isolation::UidAllocator* uids, std::string cgroup_parent,
                   std::string seccomp_bpf, std::string runner_seccomp_bpf = "");

  std::string name() const override { return "container"; }
  Result<std::unique_ptr<Instance>> Create(const SandboxConfig& config) override;
  Result<std::unique_ptr<Instance>> Adopt(const std::string& id) override;
  // Failure injection (tests): asked before each step of Create. Must outlive the backend.
  void SetFaults(CreateFaults* faults) { faults_ = faults; }

 private:
  CreateFaults* faults_ = nullptr;
  UniqueFd agent_exe_fd_;
  image::ErofsMountCache* mounts_;
  isolation::UidAllocator* uids_;
  std::string cgroup_parent_;
  std::string seccomp_bpf_;  // compiled policy, installed by every agent
  // For fncall runners: the policy without its mount rule, and no sandbox-wide Landlock
  // (Landlock forbids mounting); each call then gets both, tighter, of its own.
  std::string runner_seccomp_bpf_;
  UniqueFd host_netns_;  // to come back to after entering a sandbox's to clone it
};

// Makes sure the shared staging directory exists on the host (see isolation/rootfs.h).
Status PrepareHostDirs();

}  // namespace warren::runtime
