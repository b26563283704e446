// What a sandbox's cgroups say about its memory and CPU, and the knobs that give its memory
// back: the reads and writes density (node/density) makes on a sandbox it did not create.
//
// Works on the cgroups' paths (CgroupPaths, copied from the sandbox's Cgroup when it was
// made), never on the Cgroup object, so a density pass can run while the sandbox is being
// deleted: a path that has gone fails with ENOENT and the pass skips that sandbox.
//
// Hosts differ as cgroup.h says. Hybrid (v1 memory, v2 without controllers): memory is read
// and reclaimed in v1 (`memory.stat`, lowering `memory.limit_in_bytes` step by step), CPU use
// and pressure come from the v2 directory (`cpu.stat`, `memory.pressure`). Pure v2: all of it
// in the one directory, and reclaim is `memory.reclaim`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

struct CgroupPaths {
  std::string memory_dir;    // v1 memory DIR (agent + commands), "" on pure v2
  std::string commands_dir;  // v1 memory DIR/commands, ""
  std::string v2_dir;        // "" on hosts without cgroup2
  bool empty() const { return memory_dir.empty() && v2_dir.empty(); }
};

struct MemoryUse {
  uint64_t resident_bytes = 0;  // charged and in RAM: anonymous and page cache
  uint64_t anon_bytes = 0;      // of which anonymous (what only swap can take)
  uint64_t file_bytes = 0;      // of which page cache (dropped, or written back, on reclaim)
  uint64_t swapped_bytes = 0;   // its pages in the node's swap
  uint64_t limit_bytes = 0;     // its memory limit now (0: none)
};

Result<MemoryUse> ReadMemoryUse(const CgroupPaths& p);

// CPU time used by every process of the sandbox since it was made, in microseconds.
Result<uint64_t> ReadCpuUsec(const CgroupPaths& p);

// PSI: the share of the last 10 s in which some task of the sandbox waited for memory
// (`memory.pressure` "some avg10", percent). 0 where the kernel does not say.
double ReadMemoryPressure(const CgroupPaths& p);

// The pids of every process of the sandbox.
std::vector<pid_t> ListPids(const CgroupPaths& p);

// Whether reclaim may move the sandbox's anonymous memory to swap. A busy sandbox may not:
// the node's reclaim then drops only its page cache, and its working set stays in RAM. v1:
// `memory.swappiness` 0 or 100 (its total stays bounded by `memory.memsw.limit_in_bytes`);
// v2: `memory.swap.max` 0 or as much as its memory limit.
Status SetSwapAllowed(const CgroupPaths& p, bool allowed);

struct ReclaimResult {
  uint64_t before_bytes = 0, after_bytes = 0;
  int steps = 0;
};

// Takes memory from the sandbox until it holds about `target_bytes` or the kernel can take no
// more. v1: the limit is lowered step by step (each write reclaims synchronously, EBUSY
// once nothing more can go) and then put back where it was, so the sandbox may grow again
// and a page it touches comes back from swap; v2: `memory.reclaim`. The sandbox's processes
// keep running: what it uses now stays, what it has not touched lately goes first.
Result<ReclaimResult> ReclaimTo(const CgroupPaths& p, uint64_t target_bytes);

// The usage of the node's parent cgroup (every sandbox of the node), and its limit; the node
// budget is enforced there (`limit_bytes` 0: none).
Result<MemoryUse> ReadParentMemoryUse(const std::string& parent_name);
// Only the parent's resident bytes (`usage_in_bytes`, v2 `memory.current`): one counter, where
// its `memory.stat` (as ReadParentMemoryUse reads) sums every sandbox's cgroup below it on v1,
// which a node asking at each create paid once per sandbox it holds.
Result<uint64_t> ReadParentResidentBytes(const std::string& parent_name);
Status SetParentMemoryLimit(const std::string& parent_name, uint64_t bytes);

// The paths of sandbox cgroup `name` under the node's parent, for a sandbox made or adopted.
CgroupPaths PathsOf(const std::string& parent_name, const std::string& name);

}  // namespace warren::isolation
