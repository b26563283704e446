#include "net/remote_end.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace warren::net {

std::string RemoteEnd::AddressString() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family, addr.data(), buf, sizeof buf);
  return buf;
}

socklen_t RemoteEnd::Fill(sockaddr_storage* ss) const {
  *ss = {};
  if (family == AF_INET) {
    auto* sa = reinterpret_cast<sockaddr_in*>(ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    sa->sin_addr.s_addr = v4();
    return sizeof *sa;
  }
  auto* sa = reinterpret_cast<sockaddr_in6*>(ss);
  sa->sin6_family = AF_INET6;
  sa->sin6_port = htons(port);
  memcpy(&sa->sin6_addr, addr.data(), 16);
  return sizeof *sa;
}

}  // namespace warren::net
