#include "net/netlink.h"

#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>  // before the linux/ headers, which then skip their copies
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace warren::net {

Result<RtNetlink> RtNetlink::Open() {
  mnl_socket* s = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!s) return ErrnoStatus("open netlink socket", "route");
  if (mnl_socket_bind(s, 0, MNL_SOCKET_AUTOPID) < 0) {
    int err = errno;
    mnl_socket_close(s);
    return ErrnoStatus("bind netlink socket", "route", err);
  }
  return RtNetlink(s);
}

RtNetlink::~RtNetlink() {
  if (sock_) mnl_socket_close(sock_);
}

Status RtNetlink::Talk(void* p, const std::string& op, const std::string& object) {
  auto* nlh = static_cast<nlmsghdr*>(p);
  nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = seq_++;
  if (mnl_socket_sendto(sock_, nlh, nlh->nlmsg_len) < 0) return ErrnoStatus(op, object);
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  const uint32_t portid = mnl_socket_get_portid(sock_);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(sock_, buf.data(), buf.size());
    if (n < 0) return ErrnoStatus(op, object);
    int r =
        mnl_cb_run(buf.data(), static_cast<size_t>(n), nlh->nlmsg_seq, portid, nullptr, nullptr);
    if (r < 0) return ErrnoStatus(op, object);
    if (r == MNL_CB_STOP) return Status::Ok();
  }
}

namespace {

nlmsghdr* LinkMsg(char* buf, uint16_t type, uint16_t flags, int family, int index,
                  ifinfomsg** out) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = flags;
  auto* ifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = static_cast<unsigned char>(family);
  ifm->ifi_index = index;
  if (out) *out = ifm;
  return nlh;
}

std::string Ip4(uint32_t a) {
  const auto* b = reinterpret_cast<const uint8_t*>(&a);
  return std::to_string(b[0]) + "." + std::to_string(b[1]) + "." + std::to_string(b[2]) + "." +
         std::to_string(b[3]);
}

}  // namespace

Status RtNetlink::CreateBridge(const std::string& name) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, AF_UNSPEC, 0, nullptr);
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  nlattr* info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
  mnl_attr_nest_end(nlh, info);
  return Talk(nlh, "create bridge", name);
}

Status RtNetlink::CreateVeth(const std::string& name, int master, const std::string& peer,
                             int peer_netns_fd) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  ifinfomsg* ifm;
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, AF_UNSPEC, 0, &ifm);
  ifm->ifi_flags = IFF_UP;
  ifm->ifi_change = IFF_UP;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  if (master > 0) mnl_attr_put_u32(nlh, IFLA_MASTER, static_cast<uint32_t>(master));
  nlattr* info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  nlattr* peer_attr = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  // The peer's own ifinfomsg, then its attributes.
  auto* pifm = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  memset(pifm, 0, sizeof *pifm);
  mnl_attr_put_strz(nlh, IFLA_IFNAME, peer.c_str());
  mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<uint32_t>(peer_netns_fd));
  mnl_attr_nest_end(nlh, peer_attr);
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, info);
  return Talk(nlh, "create veth", name);
}

Status RtNetlink::SetBridgePortIsolated(int ifindex) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_SETLINK, 0, AF_BRIDGE, ifindex, nullptr);
  nlattr* prot = mnl_attr_nest_start(nlh, IFLA_PROTINFO);
  mnl_attr_put_u8(nlh, IFLA_BRPORT_ISOLATED, 1);
  mnl_attr_nest_end(nlh, prot);
  return Talk(nlh, "isolate bridge port", std::to_string(ifindex));
}

Status RtNetlink::SetUp(int ifindex, bool up) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  ifinfomsg* ifm;
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, 0, AF_UNSPEC, ifindex, &ifm);
  ifm->ifi_flags = up ? IFF_UP : 0;
  ifm->ifi_change = IFF_UP;
  return Talk(nlh, up ? "set link up" : "set link down", std::to_string(ifindex));
}

Status RtNetlink::SetMac(int ifindex, const uint8_t mac[6]) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, 0, AF_UNSPEC, ifindex, nullptr);
  mnl_attr_put(nlh, IFLA_ADDRESS, 6, mac);
  return Talk(nlh, "set link address", std::to_string(ifindex));
}

Status RtNetlink::SetGroup(int ifindex, uint32_t group) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, 0, AF_UNSPEC, ifindex, nullptr);
  mnl_attr_put_u32(nlh, IFLA_GROUP, group);
  return Talk(nlh, "set link group", std::to_string(ifindex));
}

Status RtNetlink::SetAlias(int ifindex, const std::string& alias) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_NEWLINK, 0, AF_UNSPEC, ifindex, nullptr);
  // Without the NUL, as ip(8) sends it: the kernel keeps the length it is given.
  mnl_attr_put(nlh, IFLA_IFALIAS, alias.size(), alias.data());
  return Talk(nlh, "set link alias", std::to_string(ifindex));
}

Status RtNetlink::DeleteLink(int ifindex) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = LinkMsg(buf, RTM_DELLINK, 0, AF_UNSPEC, ifindex, nullptr);
  return Talk(nlh, "delete link", std::to_string(ifindex));
}

namespace {

// RTM_NEWADDR for `family`, its address attributes still to add.
nlmsghdr* AddressMsg(char* buf, int family, int ifindex, int prefix, uint32_t flags) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWADDR;
  nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_REPLACE;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = static_cast<unsigned char>(family);
  ifa->ifa_prefixlen = static_cast<unsigned char>(prefix);
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = static_cast<uint32_t>(ifindex);
  ifa->ifa_flags = static_cast<unsigned char>(flags);
  return nlh;
}

// RTM_NEWROUTE of the default route for `family` out of `ifindex`, on-link (the sandbox's
// address is a host route), its gateway still to add.
nlmsghdr* DefaultRouteMsg(char* buf, int family, int ifindex) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWROUTE;
  nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_REPLACE;
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = static_cast<unsigned char>(family);
  rtm->rtm_dst_len = 0;
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_protocol = RTPROT_STATIC;
  rtm->rtm_scope = RT_SCOPE_UNIVERSE;
  rtm->rtm_type = RTN_UNICAST;
  rtm->rtm_flags = RTNH_F_ONLINK;
  mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(ifindex));
  return nlh;
}

}  // namespace

Status RtNetlink::AddAddress4(int ifindex, uint32_t addr, int prefix) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = AddressMsg(buf, AF_INET, ifindex, prefix, 0);
  mnl_attr_put_u32(nlh, IFA_LOCAL, addr);
  mnl_attr_put_u32(nlh, IFA_ADDRESS, addr);
  return Talk(nlh, "add address", Ip4(addr) + "/" + std::to_string(prefix));
}

Status RtNetlink::AddAddress6(int ifindex, const Ip6& addr, int prefix) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = AddressMsg(buf, AF_INET6, ifindex, prefix, IFA_F_NODAD);
  mnl_attr_put(nlh, IFA_LOCAL, addr.size(), addr.data());
  mnl_attr_put(nlh, IFA_ADDRESS, addr.size(), addr.data());
  mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
  return Talk(nlh, "add address", Ip6String(addr) + "/" + std::to_string(prefix));
}

Status RtNetlink::AddDefaultRoute4(int ifindex, uint32_t gw) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = DefaultRouteMsg(buf, AF_INET, ifindex);
  mnl_attr_put_u32(nlh, RTA_GATEWAY, gw);
  return Talk(nlh, "add default route", "via " + Ip4(gw));
}

Status RtNetlink::AddDefaultRoute6(int ifindex, const Ip6& gw) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  nlmsghdr* nlh = DefaultRouteMsg(buf, AF_INET6, ifindex);
  mnl_attr_put(nlh, RTA_GATEWAY, gw.size(), gw.data());
  return Talk(nlh, "add default route", "via " + Ip6String(gw));
}

int RtNetlink::Index(const std::string& name) {
  return static_cast<int>(if_nametoindex(name.c_str()));
}

}  // namespace warren::net
