#include "isolation/net_loopback.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

#include "base/unique_fd.h"

namespace warren::isolation {

Status BringUpLoopback() {
  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket", "lo");
  ifreq ifr{};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCGIFFLAGS", "lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return ErrnoStatus("SIOCSIFFLAGS", "lo");
  return Status::Ok();
}

}  // namespace warren::isolation
