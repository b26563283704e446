// A route netlink socket (libmnl) bound to the network namespace of the thread that opened
// it: the links, addresses and routes of a sandbox's network, made without ip(8).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "net/address_ranges.h"

struct mnl_socket;

namespace warren::net {

class RtNetlink {
 public:
  // Opens a socket in the calling thread's current network namespace.
  static Result<RtNetlink> Open();
  RtNetlink(RtNetlink&& o) noexcept : sock_(o.sock_), seq_(o.seq_) { o.sock_ = nullptr; }
  RtNetlink& operator=(RtNetlink&&) = delete;
  ~RtNetlink();

  Status CreateBridge(const std::string& name);
  // A veth pair: `name` here, enslaved to `master` (0: none) and up; `peer` created directly
  // inside the namespace `peer_netns_fd` (moving a link later costs ~35 ms, this does not).
  Status CreateVeth(const std::string& name, int master, const std::string& peer,
                    int peer_netns_fd);
  // A bridge port that cannot talk to other isolated ports: sandboxes never see each other.
  Status SetBridgePortIsolated(int ifindex);
  Status SetUp(int ifindex, bool up);
  Status SetMac(int ifindex, const uint8_t mac[6]);
  // The link's group (IFLA_GROUP), which nftables matches as iifgroup/oifgroup.
  Status SetGroup(int ifindex, uint32_t group);
  // The link's alias (IFLA_IFALIAS): a note for whoever looks at it later.
  Status SetAlias(int ifindex, const std::string& alias);
  Status DeleteLink(int ifindex);
  // Adds `addr`/`prefix` (IPv4, network byte order) to the link.
  Status AddAddress4(int ifindex, uint32_t addr, int prefix);
  // Default route via `gw` on `ifindex`, on-link (the sandbox's address is a /32).
  Status AddDefaultRoute4(int ifindex, uint32_t gw);
  // Adds `addr`/`prefix` (IPv6) to the link, usable at once: no duplicate address detection
  // (the node hands out every address on its bridge, so there is nobody to collide with).
  Status AddAddress6(int ifindex, const Ip6& addr, int prefix);
  // Default IPv6 route via `gw` on `ifindex`, on-link (the sandbox's address is a /128).
  Status AddDefaultRoute6(int ifindex, const Ip6& gw);
  // The link's index, or 0 if there is none by that name.
  int Index(const std::string& name);

 private:
  explicit RtNetlink(mnl_socket* s) : sock_(s) {}
  // Sends one request with NLM_F_ACK and waits for its answer.
  Status Talk(void* nlh, const std::string& op, const std::string& object);
  mnl_socket* sock_;
  uint32_t seq_ = 1;
};

}  // namespace warren::net
