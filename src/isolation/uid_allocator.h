// Hands out host uid/gid ranges ("slots") so no two live sandboxes share one. Thread-safe.
//
// With a lock directory, the guarantee holds across every node daemon on the host: slots are
// taken in blocks of kBlockSlots, and a block belongs to the daemon that holds an flock on
// LOCK_DIR/block-N (the kernel drops it when the daemon dies, however it dies).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "isolation/userns.h"

namespace warren::isolation {

class UidAllocator {
 public:
  // Slot i covers host ids [base + i*65536, base + (i+1)*65536).
  static constexpr uint32_t kBlockSlots = 64;
  UidAllocator(uint32_t base, uint32_t slots, std::string lock_dir = "");

  std::optional<uint32_t> Allocate();
  // Marks a slot used (re-adopting a sandbox after a restart). False if already used.
  bool Claim(uint32_t slot);
  void Release(uint32_t slot);
  IdRange RangeOf(uint32_t slot) const;
  uint32_t used() const;

 private:
  bool Owned(uint32_t slot) const REQUIRES(mu_);
  bool ClaimBlock(uint32_t block) REQUIRES(mu_);

  const uint32_t base_;
  mutable Mutex mu_;
  std::vector<bool> used_ GUARDED_BY(mu_);
  const std::string lock_dir_;
  std::vector<UniqueFd> blocks_ GUARDED_BY(mu_);  // held flocks, by block
  // Round-robin, so a just-freed range is not reused at once.
  uint32_t next_ GUARDED_BY(mu_) = 0;
  uint32_t count_ GUARDED_BY(mu_) = 0;
};

// A slot owned by a sandbox: released on destruction.
class UidSlot {
 public:
  UidSlot() = default;
  UidSlot(UidAllocator* a, uint32_t slot) : alloc_(a), slot_(slot) {}
  UidSlot(UidSlot&& o) noexcept : alloc_(std::exchange(o.alloc_, nullptr)), slot_(o.slot_) {}
  UidSlot& operator=(UidSlot&& o) noexcept {
    if (this != &o) {
      Reset();
      alloc_ = std::exchange(o.alloc_, nullptr);
      slot_ = o.slot_;
    }
    return *this;
  }
  ~UidSlot() { Reset(); }
  void Reset() {
    if (alloc_) std::exchange(alloc_, nullptr)->Release(slot_);
  }
  IdRange range() const { return alloc_->RangeOf(slot_); }
  uint32_t slot() const { return slot_; }

 private:
  UidAllocator* alloc_ = nullptr;
  uint32_t slot_ = 0;
};

}  // namespace warren::isolation
