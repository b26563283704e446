#include "isolation/rootfs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "isolation/tool_guard.h"
#include "sys/mount_api.h"

namespace warren::isolation {
namespace {

Status MkdirP(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", path);
  return Status::Ok();
}

}  // namespace

Status BuildRootfs(RootfsPlan& plan, std::string* merged) {
  // A new mount namespace owned by a new user namespace starts with the host's mounts as
  // slaves; make them private so nothing we mount leaks back and host mounts stop arriving.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return ErrnoStatus("make mounts private", "/");

  const std::string st = kStagingDir;
  uint64_t inodes = plan.inodes ? plan.inodes : std::max<uint64_t>(plan.disk_bytes / 4096, 16384);
  std::string opts = "size=" + std::to_string(plan.disk_bytes) +
                     ",nr_inodes=" + std::to_string(inodes) + ",mode=0755";
  if (mount("warren-upper", st.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
    return ErrnoStatus("mount staging tmpfs", st);
  if (chdir(st.c_str()) != 0) return ErrnoStatus("chdir", st);

  std::string lowerdir;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    std::string dir = "l" + std::to_string(i);
    WARREN_RETURN_IF_ERROR(MkdirP(dir, 0755));
    WARREN_RETURN_IF_ERROR(sys::MoveMountTo(plan.layers[i].get(), dir));
    plan.layers[i].Reset();
    lowerdir += (i ? ":" : "") + dir;
  }
  for (const char* d : {"upper", "work", "merged"}) WARREN_RETURN_IF_ERROR(MkdirP(d, 0755));

  // userxattr: overlay mounted inside a user namespace cannot use trusted.* xattrs; without
  // it removing a directory that exists in a lower layer fails with EIO. A guest root uses
  // trusted.* with what userxattr implies spelled out: no redirects, no metacopy, no index,
  // so the upper stays a plain difference (the change report and snapshots read it so).
  std::string ovl = "lowerdir=" + lowerdir + ",upperdir=upper,workdir=work," +
                    (plan.trusted_xattrs ? "redirect_dir=off,metacopy=off,index=off" : "userxattr");
  if (plan.layers.empty()) return Invalid("no layers", "rootfs");
  if (mount("overlay", "merged", "overlay", MS_NODEV, ovl.c_str()) != 0)
    return ErrnoStatus("mount overlay", st + "/merged");
  *merged = st + "/merged";
  for (const char* d : {"proc", "dev", "sys", "tmp"}) {
    std::string p = *merged + "/" + d;
    struct stat sb;
    if (lstat(p.c_str(), &sb) != 0) WARREN_RETURN_IF_ERROR(MkdirP(p, d[0] == 't' ? 01777 : 0755));
  }
  return Status::Ok();
}

Status GuardToolLayers(const std::vector<size_t>& tool_indexes, size_t layer_count,
                       const std::string& merged) {
  if (tool_indexes.empty()) return Status::Ok();
  std::vector<UniqueFd> fds;
  for (size_t i = 0; i < layer_count; ++i) {
    const std::string dir = std::string(kStagingDir) + "/l" + std::to_string(i);
    UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return ErrnoStatus("open layer", dir);
    fds.push_back(std::move(fd));
  }
  std::vector<ToolGuardPlan> plans;
  for (size_t t : tool_indexes) {
    if (t >= layer_count) return Invalid("tool layer index out of range", "rootfs");
    std::vector<int> others;
    for (size_t i = 0; i < layer_count; ++i)
      if (i != t) others.push_back(fds[i].get());
    plans.push_back(WARREN_TRY(PlanToolGuard(fds[t].get(), others)));
  }
  return ApplyToolGuard(MergeToolGuardPlans(plans), merged);
}

Status PivotInto(const std::string& new_root) {
  // pivot_root(".", ".") stacks the old root on top of the new one; detaching "." then
  // removes the old root without needing a directory for it inside the new root
  // (see pivot_root(2) NOTES, also used by nsjail and runc).
  if (chdir(new_root.c_str()) != 0) return ErrnoStatus("chdir", new_root);
  if (syscall(SYS_pivot_root, ".", ".") != 0) return ErrnoStatus("pivot_root", new_root);
  if (umount2(".", MNT_DETACH) != 0) return ErrnoStatus("detach old root", new_root);
  if (chdir("/") != 0) return ErrnoStatus("chdir", "/");
  return Status::Ok();
}

}  // namespace warren::isolation
