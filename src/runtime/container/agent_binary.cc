#include "runtime/container/agent_binary.h"

#include <fcntl.h>
#include <linux/limits.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace warren::runtime {

Result<UniqueFd> LoadSealedAgent(const std::string& path) {
  UniqueFd src(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return ErrnoStatus("open agent binary", path);
  struct stat sb;
  if (fstat(src.get(), &sb) != 0) return ErrnoStatus("stat", path);
  UniqueFd mem(memfd_create("warren-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem) return ErrnoStatus("memfd_create", "warren-agent");
  off_t off = 0;
  while (off < sb.st_size) {
    ssize_t n = sendfile(mem.get(), src.get(), &off, static_cast<size_t>(sb.st_size - off));
    if (n <= 0) return ErrnoStatus("copy agent into memfd", path);
  }
  if (fchmod(mem.get(), 0555) != 0) return ErrnoStatus("fchmod", "warren-agent memfd");
  if (fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0)
    return ErrnoStatus("seal", "warren-agent memfd");
  return mem;
}

namespace {

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

std::string DefaultAgentPath() {
  return NextToSelf("WARREN_AGENT", "warren-agent", "/usr/local/lib/warren");
}

std::string DefaultZygoteLibPath() {
  return NextToSelf("WARREN_ZYGOTE_LIB", "warren-zygote.so", "/usr/local/bin");
}

}  // namespace warren::runtime
