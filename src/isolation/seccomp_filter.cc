#include "isolation/seccomp_filter.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace warren::isolation {

Status InstallSeccompFilter(const std::string& bpf) {
  if (bpf.empty() || bpf.size() % sizeof(sock_filter) != 0)
    return Invalid("seccomp program has a bad size", "agent");
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(bpf.size() / sizeof(sock_filter));
  prog.filter = reinterpret_cast<sock_filter*>(const_cast<char*>(bpf.data()));
  // TSYNC: the agent is single-threaded today; the flag keeps that assumption checked.
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
    return ErrnoStatus("install seccomp filter", "agent");
  return Status::Ok();
}

}  // namespace warren::isolation
