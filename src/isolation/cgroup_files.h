// The cgroup hierarchies of this host (probed once) and the small file reads and writes every
// cgroup facility makes: shared by cgroup.cc (making sandboxes' cgroups) and cgroup_memory.cc
// (what density reads and writes in them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

inline constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

struct CgroupLayout {
  bool pure_v2 = false;
  std::string v2_root;                // "" when the host has no cgroup2 mount
  std::vector<std::string> v1_roots;  // memory, cpu, pids hierarchies
  // The v1 memory hierarchy, "" where there is none (pure v2).
  std::string v1_memory() const;
};

const CgroupLayout& GetCgroupLayout();

bool PathExists(const std::string& p);
// Writes `data` to a cgroup file in one write(2), as the kernel wants it.
Status WriteCgroupFile(const std::string& path, const std::string& data);
// The first number in a cgroup file ("max" reads as nullopt, like a missing file).
std::optional<uint64_t> ReadCgroupNumber(const std::string& path);
// A whole (small) cgroup file, or an error naming it.
Result<std::string> ReadCgroupFile(const std::string& path);
// The value of `key` in a "key value" file (memory.stat, cpu.stat), or nullopt.
std::optional<uint64_t> StatValue(const std::string& text, const std::string& key);

}  // namespace warren::isolation
