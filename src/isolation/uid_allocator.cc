#include "isolation/uid_allocator.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace warren::isolation {

// Whether any process on the host runs with a real, effective or saved uid in [first, end).
// A daemon that ended without deleting its sandboxes (killed, crashed) leaves them running
// with ids of a block whose lock went with it: only a restart of that daemon may take the block
// (it adopts them, Claim), never another daemon.
static bool HostUsesIds(uint64_t first, uint64_t end) {
  DIR* proc = opendir("/proc");
  if (!proc) return false;
  bool used = false;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    const char* at = strstr(buf, "\nUid:");
    if (!at) continue;
    char* p = const_cast<char*>(at) + 5;
    for (int i = 0; i < 3; ++i) {
      const uint64_t id = strtoull(p, &p, 10);
      used = used || (id >= first && id < end);
    }
    if (used) break;
  }
  closedir(proc);
  return used;
}

UidAllocator::UidAllocator(uint32_t base, uint32_t slots, std::string lock_dir)
    : base_(base),
      used_(slots, false),
      lock_dir_(std::move(lock_dir)),
      blocks_((slots + kBlockSlots - 1) / kBlockSlots) {}

bool UidAllocator::Owned(uint32_t slot) const {
  return lock_dir_.empty() || blocks_[slot / kBlockSlots].valid();
}

bool UidAllocator::ClaimBlock(uint32_t block) {
  std::string path = lock_dir_ + "/block-" + std::to_string(block);
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return false;
  blocks_[block] = std::move(fd);
  return true;
}

std::optional<uint32_t> UidAllocator::Allocate() {
  MutexLock lock(&mu_);
  const uint32_t n = static_cast<uint32_t>(used_.size());
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t s = (next_ + i) % n;
    if (!used_[s] && Owned(s)) {
      used_[s] = true;
      next_ = s + 1;
      ++count_;
      return s;
    }
  }
  // All our blocks are full: take another block no other daemon holds.
  for (uint32_t b = 0; b < blocks_.size() && !lock_dir_.empty(); ++b) {
    if (blocks_[b].valid() || !ClaimBlock(b)) continue;
    const uint64_t first = RangeOf(b * kBlockSlots).host_base;
    if (HostUsesIds(first, first + uint64_t{kBlockSlots} * 65536)) {
      blocks_[b].Reset();  // another daemon's sandboxes still run there
      continue;
    }
    uint32_t s = b * kBlockSlots;
    used_[s] = true;
    next_ = s + 1;
    ++count_;
    return s;
  }
  return std::nullopt;
}

bool UidAllocator::Claim(uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot >= used_.size() || used_[slot]) return false;
  if (!Owned(slot) && !ClaimBlock(slot / kBlockSlots)) return false;
  used_[slot] = true;
  ++count_;
  return true;
}

void UidAllocator::Release(uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot < used_.size() && used_[slot]) {
    used_[slot] = false;
    --count_;
  }
}

IdRange UidAllocator::RangeOf(uint32_t slot) const { return {base_ + slot * 65536u, 65536u}; }

uint32_t UidAllocator::used() const {
  MutexLock lock(&mu_);
  return count_;
}

}  // namespace warren::isolation
