#include "isolation/devices.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.h"

namespace warren::isolation {

Status MountMinimalDev(const std::string& root) {
  const std::string dev = root + "/dev";
  if (mount("tmpfs", dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0)
    return ErrnoStatus("mount tmpfs", dev);
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
  if (mount("shm", shm.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k,nr_inodes=16384") != 0)
    return ErrnoStatus("mount shm", shm);
  struct Link {
    const char* target;
    const char* name;
  };
  for (Link l : {Link{"pts/ptmx", "ptmx"}, Link{"/proc/self/fd", "fd"},
                 Link{"/proc/self/fd/0", "stdin"}, Link{"/proc/self/fd/1", "stdout"},
                 Link{"/proc/self/fd/2", "stderr"}}) {
    std::string p = dev + "/" + l.name;
    if (symlink(l.target, p.c_str()) != 0) return ErrnoStatus("symlink", p);
  }
  if (mount(nullptr, dev.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC | MS_BIND,
            nullptr) != 0)
    return ErrnoStatus("remount read-only", dev);
  return Status::Ok();
}

}  // namespace warren::isolation
