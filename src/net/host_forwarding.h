// IPv4 forwarding is one switch for the whole host, and several nodes may share a host (tests
// do; a node restarted after kill -9 finds the switch on). The first node to turn it on
// records what it was in a file under /run; every node reads that record, so each one's
// firewall forwards only sandbox traffic if the host forwarded nothing before, whichever node
// started first; the last node to stop puts the switch back and removes the record.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::net {

inline constexpr const char* kForwardingRecord = "/run/warren/ip_forward-before";

// Turns forwarding on; answers whether it was off before any node turned it on.
Result<bool> TurnOnHostForwarding(const std::string& record = kForwardingRecord);
// Puts forwarding back as recorded, unless `others_live` (another node still needs it).
void RestoreHostForwarding(bool others_live, const std::string& record = kForwardingRecord);

}  // namespace warren::net
