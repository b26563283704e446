// The node's zram device: compressed RAM (built into this kernel) that the node adds, makes
// swap and turns on, and turns off and removes when it stops with nothing in it. A page costs
// about a third of its size compressed, and comes back in microseconds when touched, far
// faster than from a disk.
//
// Each node adds its own device and never touches another's or the host's other swap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "isolation/node_swap.h"

namespace warren::isolation {

class ZramSwap final : public NodeSwap {
 public:
  // Adds a zram device holding up to `bytes` (uncompressed), compressed with the best ratio the
  // kernel offers it, formats it as swap and turns it on ahead of any other swap. `state_file`
  // names it for the next run. A failure removes what was added.
  static Result<std::unique_ptr<ZramSwap>> Create(uint64_t bytes, const std::string& state_file);
  // The device `device` (named by `state_file`), which is active swap.
  static std::unique_ptr<ZramSwap> Adopt(const std::string& device, const std::string& state_file);
  // Whether `path` names a zram device.
  static bool IsZram(const std::string& path);

  ~ZramSwap() override { (void)Release(); }
  ZramSwap(const ZramSwap&) = delete;
  ZramSwap& operator=(const ZramSwap&) = delete;

  Status Release() override;
  void Detach() override { index_ = -1; }
  SwapStats Stats() const override;
  uint64_t RamBytes() const override;
  const std::string& device() const override { return device_; }

 private:
  ZramSwap() = default;
  // mm_stat's compr_data_size and mem_used_total; left as they are if it cannot be read.
  void ReadMmStat(uint64_t* compressed, uint64_t* ram) const;
  int index_ = -1;
  std::string device_;  // /dev/zramN
  std::string state_file_;
};

}  // namespace warren::isolation
