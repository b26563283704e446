#include "isolation/node_swap.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "isolation/swap_file.h"
#include "isolation/zram_swap.h"
#include "sys/meminfo.h"

namespace warren::isolation {

bool IsActiveSwap(const std::string& path, SwapStats* stats) {
  std::ifstream in("/proc/swaps");
  std::string line;
  std::getline(in, line);  // the heading
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, type;
    uint64_t size_kib = 0, used_kib = 0;
    if (!(fields >> name >> type >> size_kib >> used_kib) || name != path) continue;
    if (stats) {
      stats->size_bytes = size_kib << 10;
      stats->used_bytes = used_kib << 10;
    }
    return true;
  }
  return false;
}

Result<std::unique_ptr<NodeSwap>> AdoptNodeSwap(const std::string& state_file) {
  std::ifstream in(state_file);
  std::string path;
  if (!in || !std::getline(in, path) || path.empty() || path[0] != '/')
    return NotFound("swap record", state_file);
  if (!IsActiveSwap(path)) {
    // The host restarted (or someone turned it off): nothing of any sandbox is in it. A file
    // of ours is deleted, so the next create makes a fresh one.
    if (!ZramSwap::IsZram(path)) unlink(path.c_str());
    unlink(state_file.c_str());
    return NotFound("swap", path);
  }
  if (ZramSwap::IsZram(path)) return std::unique_ptr<NodeSwap>(ZramSwap::Adopt(path, state_file));
  return std::unique_ptr<NodeSwap>(SwapFile::Adopt(path, state_file));
}

SwapStats HostSwapStats() {
  SwapStats s;
  const uint64_t total = sys::MeminfoBytes("SwapTotal"), free = sys::MeminfoBytes("SwapFree");
  s.size_bytes = total;
  s.used_bytes = total - std::min(total, free);
  return s;
}

}  // namespace warren::isolation
