#include "agent/vm_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/unique_fd.h"

namespace warren::agent {
namespace {

// linux/ipv6.h's, which clashes with glibc's netinet/in.h.
struct In6Ifreq {
  in6_addr addr;
  uint32_t prefixlen;
  int ifindex;
};

void WriteSysctl(const std::string& key, const char* value) {
  UniqueFd fd(open(("/proc/sys/net/ipv6/conf/" + key).c_str(), O_WRONLY | O_CLOEXEC));
  if (fd) (void)!write(fd.get(), value, strlen(value));
}

// The global IPv6 addresses eth0 has now (/proc/net/if_inet6: address, index, prefix
// length, scope, flags, name; scope 00 is global).
std::vector<in6_addr> GlobalAddresses6(int ifindex) {
  std::vector<in6_addr> out;
  std::ifstream in("/proc/net/if_inet6");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string hex, index, plen, scope;
    f >> hex >> index >> plen >> scope;
    if (hex.size() != 32 || scope != "00" || std::stoi(index, nullptr, 16) != ifindex) continue;
    in6_addr a{};
    for (size_t i = 0; i < 16; ++i)
      a.s6_addr[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    out.push_back(a);
  }
  return out;
}

Status ConfigureIpv6(const VmSetup::Net& net, int ifindex) {
  in6_addr ip{}, gw{};
  if (inet_pton(AF_INET6, net.ip6.c_str(), &ip) != 1) return Invalid("bad IPv6 address", net.ip6);
  if (inet_pton(AF_INET6, net.gateway6.c_str(), &gw) != 1)
    return Invalid("bad IPv6 gateway", net.gateway6);
  UniqueFd s(socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket", "guest IPv6 network");
  for (const in6_addr& old : GlobalAddresses6(ifindex)) {
    if (memcmp(&old, &ip, sizeof ip) == 0) continue;
    In6Ifreq del{old, 128, ifindex};
    (void)ioctl(s.get(), SIOCDIFADDR, &del);  // the template's, or a stale one: gone either way
  }
  In6Ifreq add{ip, 128, ifindex};
  if (ioctl(s.get(), SIOCSIFADDR, &add) != 0 && errno != EEXIST)
    return ErrnoStatus("set IPv6 address", "eth0");
  in6_rtmsg host{};
  host.rtmsg_dst = gw;
  host.rtmsg_dst_len = 128;
  host.rtmsg_flags = RTF_UP | RTF_HOST;
  host.rtmsg_ifindex = ifindex;
  host.rtmsg_metric = 1;
  if (ioctl(s.get(), SIOCADDRT, &host) != 0 && errno != EEXIST)
    return ErrnoStatus("route to IPv6 gateway", net.gateway6);
  in6_rtmsg def{};
  def.rtmsg_gateway = gw;
  def.rtmsg_flags = RTF_UP | RTF_GATEWAY;
  def.rtmsg_ifindex = ifindex;
  def.rtmsg_metric = 1;
  if (ioctl(s.get(), SIOCADDRT, &def) != 0 && errno != EEXIST)
    return ErrnoStatus("IPv6 default route", net.gateway6);
  return Status::Ok();
}

}  // namespace

Status ConfigureVmNet(const VmSetup::Net& net) {
  // Before the link is up: its link-local address usable at once, no router solicitations,
  // nothing learnt from the link. A guest kernel without IPv6 has no such files.
  if (!net.ip6.empty())
    for (const char* key : {"accept_dad", "accept_ra", "autoconf", "router_solicitations"})
      WriteSysctl(std::string("eth0/") + key, "0");

  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket", "guest network");
  auto sin = [](sockaddr* sa, const std::string& addr) {
    auto* in = reinterpret_cast<sockaddr_in*>(sa);
    in->sin_family = AF_INET;
    return inet_pton(AF_INET, addr.c_str(), &in->sin_addr) == 1;
  };
  ifreq ifr{};
  strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
  unsigned m[6];
  if (sscanf(net.mac.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6)
    return Invalid("bad MAC", net.mac);
  ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  for (int i = 0; i < 6; ++i) ifr.ifr_hwaddr.sa_data[i] = static_cast<char>(m[i]);
  if (ioctl(s.get(), SIOCSIFHWADDR, &ifr) != 0) return ErrnoStatus("set MAC", "eth0");
  if (!sin(&ifr.ifr_addr, net.ip)) return Invalid("bad address", net.ip);
  if (ioctl(s.get(), SIOCSIFADDR, &ifr) != 0) return ErrnoStatus("set address", "eth0");
  sin(&ifr.ifr_netmask, "255.255.255.255");
  if (ioctl(s.get(), SIOCSIFNETMASK, &ifr) != 0) return ErrnoStatus("set netmask", "eth0");
  if (ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return ErrnoStatus("get flags", "eth0");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return ErrnoStatus("link up", "eth0");
  char dev[] = "eth0";
  rtentry host{};
  if (!sin(&host.rt_dst, net.gateway)) return Invalid("bad gateway", net.gateway);
  sin(&host.rt_genmask, "255.255.255.255");
  host.rt_flags = RTF_UP | RTF_HOST;
  host.rt_dev = dev;
  if (ioctl(s.get(), SIOCADDRT, &host) != 0 && errno != EEXIST)
    return ErrnoStatus("route to gateway", net.gateway);
  rtentry def{};
  sin(&def.rt_dst, "0.0.0.0");
  sin(&def.rt_genmask, "0.0.0.0");
  sin(&def.rt_gateway, net.gateway);
  def.rt_flags = RTF_UP | RTF_GATEWAY;
  def.rt_dev = dev;
  if (ioctl(s.get(), SIOCADDRT, &def) != 0 && errno != EEXIST)
    return ErrnoStatus("default route", net.gateway);
  if (net.ip6.empty()) return Status::Ok();
  const int ifindex = static_cast<int>(if_nametoindex("eth0"));
  if (ifindex == 0) return ErrnoStatus("find", "eth0");
  return ConfigureIpv6(net, ifindex);
}

}  // namespace warren::agent
