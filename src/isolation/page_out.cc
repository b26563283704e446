#include "isolation/page_out.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/unique_fd.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

namespace warren::isolation {
namespace {

struct Range {
  uintptr_t start, end;
};

// The private, readable mappings of `pid` ("[vsyscall]" and the like excluded: the kernel
// refuses them and they hold nothing).
Result<std::vector<Range>> PrivateMappings(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/maps";
  FILE* f = fopen(path.c_str(), "re");
  if (!f) {
    if (errno == ENOENT || errno == ESRCH) return NotFound("process", std::to_string(pid));
    return ErrnoStatus("open", path);
  }
  std::vector<Range> out;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    unsigned long start = 0, end = 0;
    char perms[8] = {};
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3) continue;
    if (perms[0] != 'r' || perms[3] != 'p') continue;
    if (strstr(line, "[vsyscall]") || strstr(line, "[vvar") || strstr(line, "[vdso]")) continue;
    out.push_back({start, end});
  }
  fclose(f);
  return out;
}

}  // namespace

Result<PageOutResult> PageOutProcess(pid_t pid) {
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) {
    if (errno == ESRCH) return NotFound("process", std::to_string(pid));
    return ErrnoStatus("pidfd_open", std::to_string(pid));
  }
  auto ranges = WARREN_TRY(PrivateMappings(pid));
  PageOutResult r;
  // One call per mapping: the kernel stops a vector at the first mapping it refuses.
  for (const Range& range : ranges) {
    iovec iov{reinterpret_cast<void*>(range.start), range.end - range.start};
    const long n = syscall(SYS_process_madvise, pidfd.get(), &iov, 1, MADV_PAGEOUT, 0);
    if (n < 0) {
      if (errno == ESRCH) break;  // exited meanwhile
      continue;                   // EINVAL (locked, PFN map), ENOMEM (unmapped meanwhile): skip it
    }
    r.advised_bytes += static_cast<uint64_t>(n);
    ++r.mappings;
  }
  return r;
}

}  // namespace warren::isolation
