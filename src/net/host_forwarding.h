// IPv4 forwarding is one switch for the whole host, and several nodes may share a host (tests
// do; a node restarted after kill -9 finds the switch on). The first node to turn it on
// records what it was in a file under /run; every node reads that record, so each one's
// firewall forwards only sandbox traffic if the host forwarded nothing before, whichever node
// started first; the last node to stop puts the switch back and removes the record.
//
// IPv6 the same way, with one difference: its global switch (conf/all/forwarding) also makes
// every interface a router, which ignores router advertisements (accept_ra=1) and so can take
// the host's own IPv6 default route away. So the node leaves that switch alone and turns on
// force_forwarding (Linux 6.17), which forwards what arrives on an interface and changes
// nothing else. A kernel without it, and a host forwarding no IPv6, get no sandbox IPv6.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::net {

inline constexpr const char* kForwardingRecord = "/run/warren/ip_forward-before";
inline constexpr const char* kForwarding6Record = "/run/warren/ipv6_forward-before";

// Turns forwarding on; answers whether it was off before any node turned it on.
Result<bool> TurnOnHostForwarding(const std::string& record = kForwardingRecord);
// Puts forwarding back as recorded, unless `others_live` (another node still needs it).
void RestoreHostForwarding(bool others_live, const std::string& record = kForwardingRecord);

enum class Forwarding6 {
  kUnavailable,  // no IPv6 on the host, or no way to forward it without the global switch
  kWasOff,       // the host forwarded no IPv6 before any node turned it on
  kWasOn,
};
// `proc_sys_net`: where the net sysctls are (tests point it at a directory of their own).
Result<Forwarding6> TurnOnHostForwarding6(const std::string& record = kForwarding6Record,
                                          const std::string& proc_sys_net = "/proc/sys/net");
void RestoreHostForwarding6(bool others_live, const std::string& record = kForwarding6Record,
                            const std::string& proc_sys_net = "/proc/sys/net");

}  // namespace warren::net
