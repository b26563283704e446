#include "isolation/capabilities.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace warren::isolation {

uint64_t KeptCapabilities(bool chroot) {
  uint64_t m = 0;
  for (int c :
       {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_SETGID, CAP_SETUID, CAP_SETFCAP,
        CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE})
    m |= 1ull << c;
  if (!chroot) m &= ~(1ull << CAP_SYS_CHROOT);
  return m;
}

namespace {

// Drops every capability not kept from the bounding set: 0, or the failed step (N+1 for
// capability N) with errno set.
int NarrowBoundingSetRaw(bool chroot) {
  const uint64_t keep = KeptCapabilities(chroot);
  for (int c = 0; c <= 63; ++c) {
    if (keep & (1ull << c)) continue;
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // beyond the kernel's last capability: all dropped
      return c + 1;
    }
  }
  return 0;
}

// A raw step (see RestrictCapabilitiesRaw) as a status naming what failed.
Status StepStatus(int step) {
  if (step == 0) return Status::Ok();
  if (step <= 64) return ErrnoStatus("drop capability " + std::to_string(step - 1), "bounding set");
  return ErrnoStatus(step == 100   ? "clear ambient capabilities"
                     : step == 101 ? "capget"
                                   : "capset",
                     "exec");
}

}  // namespace

Status NarrowBoundingSet(bool chroot) { return StepStatus(NarrowBoundingSetRaw(chroot)); }

int RestrictCapabilitiesRaw(bool chroot, bool bounding) {
  const uint64_t keep = KeptCapabilities(chroot);
  if (bounding)
    if (int step = NarrowBoundingSetRaw(chroot); step != 0) return step;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return 100;
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return 101;
  for (int i = 0; i < 2; ++i) {
    uint32_t k = static_cast<uint32_t>(keep >> (32 * i));
    data[i].effective &= k;
    data[i].permitted &= k;
    data[i].inheritable &= k;
  }
  if (syscall(SYS_capset, &hdr, data) != 0) return 102;
  return 0;
}

Status RestrictCapabilities() { return StepStatus(RestrictCapabilitiesRaw()); }

}  // namespace warren::isolation
