#include "sys/unix_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace warren::sys {

Result<sockaddr_un> UnixAddr(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Invalid("socket path too long", path);
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

Result<UniqueFd> ListenUnix(const std::string& path, int type, int backlog) {
  sockaddr_un addr = WARREN_TRY(UnixAddr(path));
  UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("socket", path);
  unlink(path.c_str());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd.get(), backlog) != 0)
    return ErrnoStatus("listen", path);
  return fd;
}

Result<UniqueFd> ConnectUnix(const std::string& path, int type) {
  sockaddr_un addr = WARREN_TRY(UnixAddr(path));
  UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus("socket", path);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoStatus("connect", path);
  return fd;
}

}  // namespace warren::sys
