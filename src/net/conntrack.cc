#include "net/conntrack.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <vector>

#include "net/firewall.h"

namespace warren::net {
namespace {

struct Dump {
  uint32_t src;
  Ip6 src6;
  const KeepConnection* keep;
  std::vector<nf_conntrack*> doomed;
};

int OnEntry(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* data) {
  auto* d = static_cast<Dump*>(data);
  RemoteEnd end;
  end.family = nfct_get_attr_u8(ct, ATTR_ORIG_L3PROTO);
  if (end.family == AF_INET) {
    if (nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_SRC) != d->src) return NFCT_CB_CONTINUE;
    end = RemoteEnd::V4(nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_DST), 0, Proto::kAny);
  } else if (end.family == AF_INET6) {
    const void* src = nfct_get_attr(ct, ATTR_ORIG_IPV6_SRC);
    if (!src || memcmp(src, d->src6.data(), d->src6.size()) != 0) return NFCT_CB_CONTINUE;
    memcpy(end.addr.data(), nfct_get_attr(ct, ATTR_ORIG_IPV6_DST), end.addr.size());
  } else {
    return NFCT_CB_CONTINUE;
  }
  uint8_t l4 = nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO);
  end.proto = l4 == IPPROTO_TCP ? Proto::kTcp : l4 == IPPROTO_UDP ? Proto::kUdp : Proto::kAny;
  end.port = end.proto == Proto::kAny ? 0 : ntohs(nfct_get_attr_u16(ct, ATTR_ORIG_PORT_DST));
  if (end.proto != Proto::kAny && (*d->keep)(end)) return NFCT_CB_CONTINUE;
  d->doomed.push_back(nfct_clone(ct));
  return NFCT_CB_CONTINUE;
}

}  // namespace

Result<int> DeleteConnections(uint32_t src, const KeepConnection& keep) {
  std::unique_ptr<nfct_handle, decltype(&nfct_close)> h(nfct_open(CONNTRACK, 0), &nfct_close);
  if (!h) return ErrnoStatus("open conntrack", Ip4String(src));
  Dump d{src, SandboxAddress6(src), &keep, {}};
  nfct_callback_register(h.get(), NFCT_T_ALL, OnEntry, &d);
  uint32_t family = AF_UNSPEC;  // both families in one dump
  if (nfct_query(h.get(), NFCT_Q_DUMP, &family) != 0) {
    int err = errno;
    for (auto* ct : d.doomed) nfct_destroy(ct);
    return ErrnoStatus("dump conntrack", Ip4String(src), err);
  }
  int n = 0;
  for (auto* ct : d.doomed) {
    // Gone already (closed meanwhile) is fine.
    if (nfct_query(h.get(), NFCT_Q_DESTROY, ct) == 0) ++n;
    nfct_destroy(ct);
  }
  return n;
}

}  // namespace warren::net
