// Cgroups for one sandbox: resource limits and a kill switch.
//
// Hosts differ: pure cgroup v2 (limits and everything else in one tree), or hybrid like the
// build machine (limits only in v1 memory/cpu/pids hierarchies, plus a v2 tree without
// controllers that still offers cgroup.kill, freeze and CLONE_INTO_CGROUP). The layout is
// probed once; a Cgroup owns the directories it made and removes them on Destroy().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "isolation/cgroup_memory.h"

namespace warren::isolation {

struct CgroupLimits {
  uint64_t memory_bytes = 512ull << 20;  // 0: unlimited. Swap is not allowed on top.
  uint64_t pids = 512;                   // 0: unlimited
  double cpus = 1.0;                     // 0: unlimited
};

class Cgroup {
 public:
  // Creates the sandbox's cgroup directories under `parent` (one per node daemon, e.g.
  // "warren-1a2b3c4d", created if missing) and writes the limits.
  static Result<Cgroup> Create(const std::string& parent, const std::string& name,
                               const CgroupLimits& limits);

  // The existing directories of sandbox `name` (re-adopting it after a daemon restart).
  static Result<Cgroup> Open(const std::string& parent, const std::string& name);
  // Writes the limits (again): a sandbox made ahead of demand gets those of its request.
  Status SetLimits(const CgroupLimits& limits);
  // True if `pid` is in this cgroup (v2): tells our sandbox's init from a recycled pid.
  bool Holds(pid_t pid) const;

  Cgroup() = default;
  Cgroup(Cgroup&&) = default;
  Cgroup& operator=(Cgroup&& o) noexcept {
    if (this != &o) {
      (void)Destroy();
      dirs_ = std::move(o.dirs_);
      commands_dir_ = std::move(o.commands_dir_);
      v2_dir_ = std::move(o.v2_dir_);
      v2_fd_ = std::move(o.v2_fd_);
      limits_ = o.limits_;
    }
    return *this;
  }
  ~Cgroup() { (void)Destroy(); }

  // The v2 directory fd for clone3(CLONE_INTO_CGROUP), or -1 on hosts without cgroup2.
  int v2_fd() const { return v2_fd_.get(); }
  // Closes that fd once the sandbox's init is in: the daemon's fd budget is per sandbox.
  void CloseCloneFd() { v2_fd_.Reset(); }
  // Moves `pid` into every directory that CLONE_INTO_CGROUP did not cover (the v1 ones).
  Status AttachV1(pid_t pid);
  // An fd open for writing on the commands' cgroup.procs (v1 memory hierarchy), or an invalid
  // fd where there is none. Opened by the node (host root): a command writes "0" to it to
  // move itself in, which cgroup v1 permits because it checks the opener's credentials.
  Result<UniqueFd> OpenCommandsProcs() const;
  // Moves the process `pid` (all its threads) into every directory, v1 and v2: a pre-started
  // microVM joins the cgroup of the sandbox it is handed to (cgroup2 cannot rename). Memory
  // it was charged before stays with its old cgroup.
  Status Enter(pid_t pid);
  // SIGKILLs every process in the cgroup (v2 cgroup.kill), when available.
  Status Kill();
  // Freezes or thaws every process (v2 cgroup.freeze) and waits until the kernel reports it
  // done. Unavailable on hosts without a cgroup2 hierarchy.
  Status Freeze(bool frozen);
  // Whether the cgroup is frozen (or freezing) now: a paused sandbox.
  bool Frozen() const;
  // Removes the directories; the processes must be gone (retries briefly on EBUSY while
  // the last ones are being reaped).
  Status Destroy();

  const std::vector<std::string>& dirs() const { return dirs_; }
  // Its directories, for what reads and reclaims its memory without owning it (density).
  CgroupPaths paths() const;

 private:
  std::vector<std::string> dirs_;       // v1 dirs; v2 dir last
  std::optional<CgroupLimits> limits_;  // as last written (unknown for an adopted cgroup)
  std::string commands_dir_;            // v1 memory DIR/commands, where commands run
  std::string v2_dir_;
  UniqueFd v2_fd_;
};

// Kills every process in, and removes, sandbox cgroups left under `parent` by an earlier run
// of the same node daemon. Returns how many sandbox cgroups it found.
int ReapStaleCgroups(const std::string& parent, const std::set<std::string>& keep = {});
// Removes the (empty) parent directories when the node shuts down.
void RemoveCgroupParent(const std::string& parent);

// Describes the probed layout, for logs and /v1/nodes.
std::string CgroupLayoutName();

}  // namespace warren::isolation
