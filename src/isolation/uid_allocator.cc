#include "isolation/uid_allocator.h"

namespace warren::isolation {

UidAllocator::UidAllocator(uint32_t base, uint32_t slots) : base_(base), used_(slots, false) {}

std::optional<uint32_t> UidAllocator::Allocate() {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < used_.size(); ++i) {
    uint32_t s = (next_ + static_cast<uint32_t>(i)) % static_cast<uint32_t>(used_.size());
    if (!used_[s]) {
      used_[s] = true;
      next_ = s + 1;
      ++count_;
      return s;
    }
  }
  return std::nullopt;
}

bool UidAllocator::Claim(uint32_t slot) {
  std::lock_guard lock(mu_);
  if (slot >= used_.size() || used_[slot]) return false;
  used_[slot] = true;
  ++count_;
  return true;
}

void UidAllocator::Release(uint32_t slot) {
  std::lock_guard lock(mu_);
  if (slot < used_.size() && used_[slot]) {
    used_[slot] = false;
    --count_;
  }
}

IdRange UidAllocator::RangeOf(uint32_t slot) const { return {base_ + slot * 65536u, 65536u}; }

uint32_t UidAllocator::used() const {
  std::lock_guard lock(mu_);
  return count_;
}

}  // namespace warren::isolation
