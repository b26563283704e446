#include "runtime/container/agent_binary.h"

#include <fcntl.h>
#include <linux/limits.h>
#include <linux/mount.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "isolation/cgroup_files.h"
#include "runtime/executable_prefix.h"
#include "sys/mount_api.h"

namespace warren::runtime {
namespace {

constexpr uint64_t kHugePage = 2ull << 20;
constexpr char kAgentName[] = "warren-agent";

// The first `len` bytes of `src` into `dst`, its ELF header then naming no section headers
// (they are not copied).
Status CopyPrefix(int src, int dst, uint64_t len, const std::string& path) {
  off_t off = 0;
  while (static_cast<uint64_t>(off) < len) {
    ssize_t n = sendfile(dst, src, &off, static_cast<size_t>(len - static_cast<uint64_t>(off)));
    if (n < 0) return ErrnoStatus("copy the agent", path);
    if (n == 0) return Status(Code::kInternal, "copy the agent", path, "the file got shorter");
  }
  char head[64];
  if (len >= sizeof head && pread(dst, head, sizeof head, 0) == sizeof head &&
      DropSectionHeaders(head, sizeof head) && pwrite(dst, head, sizeof head, 0) != sizeof head)
    return ErrnoStatus("write the agent's header", path);
  return Status::Ok();
}

// A tmpfs of its own, attached nowhere, with huge pages: the agent alone on it, then the
// filesystem and the mount made read-only. The file is opened again read-only; that fd keeps
// the mount alive, and the mount's own fd is closed on return, which matters: while a detached
// mount's fd is open, anyone who can mount in their own namespace may clone it (open_tree
// through /proc/1/exe), and once its fd is gone that fails (EINVAL). A clone would still find
// the superblock read-only, undone only with CAP_SYS_ADMIN in the host's user namespace; and
// the file is host root's, mode 0555, so a sandbox's root (host root unmapped) gets EACCES
// before any of that.
Result<UniqueFd> OnHugeTmpfs(int src, uint64_t len, const std::string& path) {
  const uint64_t room = (len + kHugePage - 1) / kHugePage * kHugePage;
  UniqueFd mnt = WARREN_TRY(sys::FsMount(
      "tmpfs", kAgentName,
      {{"huge", "always"}, {"size", std::to_string(room)}, {"nr_inodes", "4"}, {"mode", "0755"}},
      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  {
    UniqueFd out(openat(mnt.get(), kAgentName, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0555));
    if (!out) return ErrnoStatus("create the agent's file", "tmpfs");
    WARREN_RETURN_IF_ERROR(CopyPrefix(src, out.get(), len, path));
  }
  WARREN_RETURN_IF_ERROR(sys::MakeSuperblockReadOnly(mnt.get()));
  WARREN_RETURN_IF_ERROR(sys::SetMountAttrs(mnt.get(), MOUNT_ATTR_RDONLY));
  UniqueFd agent(openat(mnt.get(), kAgentName, O_RDONLY | O_CLOEXEC));
  if (!agent) return ErrnoStatus("open the agent's file", "tmpfs");
  return agent;
}

Result<UniqueFd> InSealedMemfd(int src, uint64_t len, const std::string& path) {
  UniqueFd mem(memfd_create(kAgentName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem) return ErrnoStatus("memfd_create", kAgentName);
  WARREN_RETURN_IF_ERROR(CopyPrefix(src, mem.get(), len, path));
  if (fchmod(mem.get(), 0555) != 0) return ErrnoStatus("fchmod", "warren-agent memfd");
  if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0)
    return ErrnoStatus("seal", "warren-agent memfd");
  return mem;
}

// $env if set, else `name` in the running executable's directory (else in `fallback_dir`).
std::string NextToSelf(const char* env, const char* name, const char* fallback_dir) {
  if (const char* p = getenv(env)) return p;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::string(fallback_dir) + "/" + name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/')) + "/" + name;
}

}  // namespace

Result<UniqueFd> LoadAgent(const std::string& path, std::string* how) {
  UniqueFd src(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return ErrnoStatus("open agent binary", path);
  struct stat sb;
  if (fstat(src.get(), &sb) != 0) return ErrnoStatus("stat", path);
  const uint64_t len = ExecutablePrefixBytes(src.get(), static_cast<uint64_t>(sb.st_size));
  auto huge = OnHugeTmpfs(src.get(), len, path);
  if (huge.ok()) {
    if (how) {
      // `deny` overrides every tmpfs's own huge= (transparent_hugepage/shmem_enabled).
      auto shmem = isolation::ReadCgroupFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
      const bool denied = shmem.ok() && shmem->find("[deny]") != std::string::npos;
      *how = "on a tmpfs of its own (" + std::to_string(len >> 10) + " KiB), " +
             (denied ? "in small pages: the host denies tmpfs huge pages" : "with huge pages");
    }
    return huge;
  }
  UniqueFd mem = WARREN_TRY(InSealedMemfd(src.get(), len, path));
  if (how)
    *how = "in a sealed memfd (" + std::to_string(len >> 10) +
           " KiB; no tmpfs of its own: " + huge.status().ToString() + ")";
  return mem;
}

std::string DefaultAgentPath() {
  return NextToSelf("WARREN_AGENT", "warren-agent", "/usr/local/lib/warren");
}

std::string DefaultZygoteLibPath() {
  return NextToSelf("WARREN_ZYGOTE_LIB", "warren-zygote.so", "/usr/local/bin");
}

}  // namespace warren::runtime
