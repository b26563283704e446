// The node's own swap (density): where idle sandboxes' pages go, so a page comes back when it
// is touched. Two kinds, one per file: a zram device (zram_swap.h: compressed RAM, built into
// this kernel, the fastest to wake from) and a swap file on a local disk (swap_file.h: slower
// to wake from, but costs no RAM at all).
//
// Each is named in a state file. A node that stops or is killed while sandboxes' pages are in
// it leaves it on (Detach), and its next run adopts it: turning it off would pull every page
// back into RAM at once, past the budget the sandboxes were packed to.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace warren::isolation {

struct SwapStats {
  uint64_t size_bytes = 0;        // the swap's size (uncompressed)
  uint64_t used_bytes = 0;        // pages in it (uncompressed)
  uint64_t compressed_bytes = 0;  // what they take where they are (compressed for zram)
  uint64_t ram_bytes = 0;         // the RAM it uses for them (0 for a file)
};

class NodeSwap {
 public:
  virtual ~NodeSwap() = default;
  virtual SwapStats Stats() const = 0;
  // Stats().ram_bytes alone, read without the rest (`/proc/swaps`): the node's admission asks
  // for it at every create.
  virtual uint64_t RamBytes() const = 0;
  // The device or file, as /proc/swaps names it.
  virtual const std::string& device() const = 0;
  // Turns it off (pages still in it come back into RAM first) and removes it and its state
  // file. On failure (ENOMEM: the pages do not fit) it stays on and named.
  virtual Status Release() = 0;
  // Leaves it on and named for the next run; the object no longer owns it.
  virtual void Detach() = 0;
};

// Priority of a node's swap: above any swap the host set up itself (its priorities are -2 and
// down unless set), so idle sandboxes' pages land in the node's own.
inline constexpr int kNodeSwapPriority = 100;

// The swap `state_file` names, if it is still on (an earlier run of this node stopped or was
// killed); kNotFound if there is none (a stale state file is removed).
Result<std::unique_ptr<NodeSwap>> AdoptNodeSwap(const std::string& state_file);

// Whether `path` is an active swap (/proc/swaps), and its line's size and use.
bool IsActiveSwap(const std::string& path, SwapStats* stats = nullptr);

// The host's swap in use and in total (every device, /proc/meminfo).
SwapStats HostSwapStats();

}  // namespace warren::isolation
