// Which addresses a sandbox's traffic may be led to: the ranges that public DNS must not open
// (a hostile or rebinding server would otherwise reach the node's own networks), for IPv4 and
// IPv6, and the IPv4 address an IPv6 one stands for.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace warren::net {

using Ip6 = std::array<uint8_t, 16>;

// Private, shared (CGNAT), benchmarking and reserved ranges, loopback, link-local, multicast
// and cloud platform endpoints: reachable only when an address rule names them.
bool IsInternalAddress(uint32_t addr);  // network byte order

// The IPv6 counterpart: unspecified, loopback, unique-local (fc00::/7), link- and site-local,
// multicast, discard-only, documentation and the IETF's protocol block (Teredo among them),
// NAT64's local-use prefix; and an address that stands for an IPv4 one (below) is as
// internal as that one.
bool IsInternalAddress6(const Ip6& addr);

// IPv6 addresses no sandbox traffic goes to whatever its rules say: ::/96 (::, ::1 and the
// v4-compatible form), ::ffff:0:0/96 (the kernel connects it over IPv4, past every IPv6 rule:
// a sandbox writes the IPv4 address instead), link- and site-local, multicast.
bool IsNeverReachable6(const Ip6& addr);

// The IPv4 address an IPv6 one stands for, in the forms by which a connect or a gateway
// reaches it: v4-mapped (::ffff:a.b.c.d, which the kernel connects over IPv4), the
// deprecated v4-compatible (::a.b.c.d), NAT64's well-known prefix (64:ff9b::/96) and 6to4
// (2002:AABB:CCDD::/48). nullopt for any other address.
std::optional<uint32_t> EmbeddedIpv4(const Ip6& addr);  // network byte order

// A sandbox's IPv6 address is its IPv4 one inside this unique-local /96 ("Warren" after fd):
// no second allocator, no second record, and the node's IPv6 subnet is its IPv4 subnet with
// 96 added to the prefix, as distinct between the nodes of a host as their IPv4 subnets are.
inline constexpr Ip6 kSandboxPrefix6 = {0xfd, 0x57, 0x61, 0x72, 0x72, 0x65, 0x6e, 0x00};
Ip6 SandboxAddress6(uint32_t addr);  // network byte order

std::string Ip6String(const Ip6& addr);

// Whether the first `prefix` bits of `a` and `b` agree.
bool PrefixMatches(const uint8_t* a, const uint8_t* b, int prefix);

}  // namespace warren::net
