// The node's swap device: a zram device (compressed RAM, built into this kernel) that the node
// adds, makes swap and turns on, and turns off and removes when it stops. Idle sandboxes'
// pages go there (density): a page costs about a third of its size compressed, and comes back
// in microseconds when touched, far faster than from a disk.
//
// A node that is killed leaves its device on, with the pages of sandboxes that survived it;
// its next run adopts the device from the file that names it (never another node's: each
// node adds its own device, and a host's other swap is left alone).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace warren::isolation {

struct SwapStats {
  uint64_t size_bytes = 0;        // the swap's size (uncompressed)
  uint64_t used_bytes = 0;        // pages in it (uncompressed)
  uint64_t compressed_bytes = 0;  // what they take compressed
  uint64_t ram_bytes = 0;         // the RAM the device uses for them (allocator included)
};

class ZramSwap {
 public:
  // Adds a zram device holding up to `bytes` (uncompressed), compressed with lz4 where the
  // kernel offers it, formats it as swap and turns it on ahead of any other swap. `state_file`
  // names it for the next run.
  static Result<ZramSwap> Create(uint64_t bytes, const std::string& state_file);
  // The device `state_file` names, if it is still swap (an earlier run of this node was
  // killed); kNotFound if there is none.
  static Result<ZramSwap> Adopt(const std::string& state_file);

  ZramSwap() = default;
  ZramSwap(ZramSwap&& o) noexcept { *this = std::move(o); }
  ZramSwap& operator=(ZramSwap&& o) noexcept;
  ~ZramSwap() { (void)Release(); }

  // Turns it off (pages still in it come back into RAM first), resets and removes the device.
  Status Release();
  SwapStats Stats() const;
  const std::string& device() const { return device_; }
  bool active() const { return index_ >= 0; }

 private:
  int index_ = -1;
  std::string device_;  // /dev/zramN
  std::string state_file_;
};

// The host's swap in use and in total (every device, /proc/meminfo).
SwapStats HostSwapStats();

}  // namespace warren::isolation
