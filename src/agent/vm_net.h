// A microVM's or whole VM's network, set by its agent as the guest's root: eth0 takes the
// MAC and addresses the node gave the sandbox. The node's firewall decides what any of it may
// reach; nothing here is a defence.
#pragma once

#include "agent/setup_messages.h"
#include "base/status.h"

namespace warren::agent {

// eth0: its MAC, its /32 address, an on-link route to the gateway and the default route
// through it; with `net.ip6`, the same for IPv6 (a /128, no duplicate address detection, no
// router advertisements), after dropping an IPv6 address a fork's template had. Run again by
// a fork's refresh with the fork's own addresses.
Status ConfigureVmNet(const VmSetup::Net& net);

}  // namespace warren::agent
