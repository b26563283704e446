#include "isolation/ipcns_pristine.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace warren::isolation {
namespace {

constexpr const char* kNextIds[3] = {"/proc/sys/kernel/shm_next_id", "/proc/sys/kernel/msg_next_id",
                                     "/proc/sys/kernel/sem_next_id"};

// The knob reads "0": no object of its kind was made since it was set.
bool Unused(int fd) {
  char buf[16];
  const ssize_t n = pread(fd, buf, sizeof buf, 0);
  return n == 2 && memcmp(buf, "0\n", 2) == 0;
}

}  // namespace

bool IpcnsProbe::Open() {
  for (int i = 0; i < 3; ++i) {
    next_id_[i] = UniqueFd(open(kNextIds[i], O_RDWR | O_CLOEXEC));
    if (!next_id_[i] || pwrite(next_id_[i].get(), "0", 1, 0) != 1) return false;
  }
  // The namespace's own mqueue superblock (mounting mqueue from inside finds it, not a new
  // one), detached: never in any tree, only for the size of its root.
  const UniqueFd fs(fsopen("mqueue", FSOPEN_CLOEXEC));
  if (!fs || fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return false;
  mqueue_ = UniqueFd(
      fsmount(fs.get(), FSMOUNT_CLOEXEC,
              MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
  struct stat st {};
  if (!mqueue_ || fstat(mqueue_.get(), &st) != 0) return false;
  empty_size_ = st.st_size;  // "." and ".." (each queue adds to it)
  return Pristine();
}

bool IpcnsProbe::Pristine() const {
  for (const UniqueFd& fd : next_id_)
    if (!fd || !Unused(fd.get())) return false;
  struct stat st {};
  return mqueue_ && fstat(mqueue_.get(), &st) == 0 && st.st_size == empty_size_;
}

}  // namespace warren::isolation
