#include "isolation/devices.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.h"

namespace warren::isolation {

Status MountMinimalDev(const std::string& root, const std::string& scratch) {
  const std::string dev = root + "/dev", src_dev = scratch + "/dev", src_shm = scratch + "/shm";
  if (mkdir(src_dev.c_str(), 0755) != 0) return ErrnoStatus("mkdir", src_dev);
  if (mkdir(src_shm.c_str(), 0755) != 0 || chmod(src_shm.c_str(), 01777) != 0)
    return ErrnoStatus("mkdir", src_shm);
  if (mount(src_dev.c_str(), dev.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return ErrnoStatus("bind", dev);
  // mknod is not allowed in a user namespace: bind the host's harmless nodes instead.
  for (const char* name : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string src = std::string("/dev/") + name;
    std::string dst = dev + "/" + name;
    UniqueFd f(open(dst.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666));
    if (!f) return ErrnoStatus("create", dst);
    if (mount(src.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return ErrnoStatus("bind device", src);
  }
  for (const char* d : {"pts", "shm"}) {
    std::string p = dev + "/" + d;
    if (mkdir(p.c_str(), 0755) != 0) return ErrnoStatus("mkdir", p);
  }
  std::string pts = dev + "/pts";
  if (mount("devpts", pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=0620") != 0)
    return ErrnoStatus("mount devpts", pts);
  std::string shm = dev + "/shm";
  if (mount(src_shm.c_str(), shm.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return ErrnoStatus("bind", shm);
  if (mount(nullptr, shm.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr) !=
      0)
    return ErrnoStatus("remount", shm);
  struct Link {
    const char* target;
    const char* name;
  };
  for (Link l :
       {Link{"pts/ptmx", "ptmx"}, Link{"/proc/self/fd", "fd"}, Link{"/proc/self/fd/0", "stdin"},
        Link{"/proc/self/fd/1", "stdout"}, Link{"/proc/self/fd/2", "stderr"}}) {
    std::string p = dev + "/" + l.name;
    if (symlink(l.target, p.c_str()) != 0) return ErrnoStatus("symlink", p);
  }
  if (mount(nullptr, dev.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC | MS_BIND,
            nullptr) != 0)
    return ErrnoStatus("remount read-only", dev);
  return Status::Ok();
}

}  // namespace warren::isolation
