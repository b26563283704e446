#include "net/sock_destroy.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstring>
#include <vector>

namespace warren::net {
namespace {

struct Dumped {
  std::vector<inet_diag_sockid> doomed;
  const KeepConnection* keep;
  uint8_t family;
  Proto proto;
};

// The remote end of a socket; false for one to leave alone (unconnected, loopback, self).
bool RemoteOf(const inet_diag_msg& msg, Proto proto, RemoteEnd* end) {
  const uint16_t port = ntohs(msg.id.idiag_dport);
  if (msg.idiag_family == AF_INET) {
    const uint32_t dst = msg.id.idiag_dst[0], src = msg.id.idiag_src[0];
    if (dst == 0 || (ntohl(dst) >> 24) == 127 || dst == src) return false;
    *end = RemoteEnd::V4(dst, port, proto);
    return true;
  }
  Ip6 dst, src;
  memcpy(dst.data(), msg.id.idiag_dst, dst.size());
  memcpy(src.data(), msg.id.idiag_src, src.size());
  static constexpr Ip6 kZero{}, kLoopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (dst == kZero || dst == kLoopback || dst == src) return false;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(dst.data(), kMapped, sizeof kMapped) == 0) {
    uint32_t v4, src4;
    memcpy(&v4, dst.data() + 12, 4);
    memcpy(&src4, src.data() + 12, 4);
    if ((ntohl(v4) >> 24) == 127 || v4 == src4) return false;
    *end = RemoteEnd::V4(v4, port, proto);
    return true;
  }
  *end = RemoteEnd{AF_INET6, dst, port, proto};
  return true;
}

int OnSocket(const nlmsghdr* nlh, void* data) {
  auto* d = static_cast<Dumped*>(data);
  const auto* msg = static_cast<const inet_diag_msg*>(mnl_nlmsg_get_payload(nlh));
  if (msg->idiag_family != d->family || msg->idiag_state == TCP_LISTEN) return MNL_CB_OK;
  RemoteEnd end;
  if (!RemoteOf(*msg, d->proto, &end) || (*d->keep)(end)) return MNL_CB_OK;
  d->doomed.push_back(msg->id);
  return MNL_CB_OK;
}

Status Request(mnl_socket* nl, uint16_t type, uint16_t flags, uint8_t family, uint8_t protocol,
               const inet_diag_sockid* id, Dumped* dump) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  static uint32_t seq = 1;
  nlh->nlmsg_seq = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
  auto* req =
      static_cast<inet_diag_req_v2*>(mnl_nlmsg_put_extra_header(nlh, sizeof(inet_diag_req_v2)));
  req->sdiag_family = family;
  req->sdiag_protocol = protocol;
  req->idiag_states = ~0u;
  if (id) req->id = *id;
  if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
    return ErrnoStatus("sock_diag request", "sockets");
  const uint32_t portid = mnl_socket_get_portid(nl);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(nl, buf.data(), buf.size());
    if (n < 0) return ErrnoStatus("sock_diag reply", "sockets");
    int r = mnl_cb_run(buf.data(), static_cast<size_t>(n), nlh->nlmsg_seq, portid,
                       dump ? OnSocket : nullptr, dump);
    if (r < 0)
      return ErrnoStatus(type == SOCK_DESTROY ? "destroy socket" : "list sockets", "sockets");
    if (r == MNL_CB_STOP) return Status::Ok();
  }
}

}  // namespace

Result<int> DestroySockets(const KeepConnection& keep) {
  mnl_socket* nl = mnl_socket_open2(NETLINK_SOCK_DIAG, SOCK_CLOEXEC);
  if (!nl) return ErrnoStatus("open sock_diag", "sockets");
  int destroyed = 0;
  Status st;
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) st = ErrnoStatus("bind sock_diag", "sockets");
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}})
    for (auto [protocol, proto] :
         {std::pair{IPPROTO_TCP, Proto::kTcp}, std::pair{IPPROTO_UDP, Proto::kUdp}}) {
      if (!st.ok()) break;
      const auto p = static_cast<uint8_t>(protocol);
      Dumped d{{}, &keep, family, proto};
      st = Request(nl, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, family, p, nullptr, &d);
      for (const auto& id : d.doomed) {
        // Gone meanwhile (ENOENT) is fine.
        if (Request(nl, SOCK_DESTROY, NLM_F_ACK, family, p, &id, nullptr).ok()) ++destroyed;
      }
    }
  mnl_socket_close(nl);
  if (!st.ok()) return st;
  return destroyed;
}

}  // namespace warren::net
