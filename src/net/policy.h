// A sandbox's egress policy: mode none|egress and allow rules, parsed once into a form the
// firewall, the DNS resolver and the egress proxy all check against, so the three agree.
//
// Rule syntax (CONTRACT.md): a domain ("pypi.org"), a wildcard domain ("*.debian.org": any
// name strictly below debian.org, not debian.org itself, as in TLS), an address or CIDR
// ("10.0.0.0/8", "192.0.2.7", "2001:db8::/32"), each optionally followed by ":PORT" or
// ":LO-HI" and then "/tcp" or "/udp". IPv6 with a port is written in brackets:
// "[2001:db8::/32]:443/tcp". No port means every port; no protocol means tcp and udp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace warren::net {

enum class Proto { kAny, kTcp, kUdp };

struct EgressRule {
  std::string text;    // as given, for errors and the API
  std::string domain;  // lowercased, no trailing dot; empty for an address rule
  bool wildcard = false;
  int family = 0;  // AF_INET or AF_INET6 for an address rule
  std::array<uint8_t, 16> addr{};
  int prefix = 0;
  uint16_t port_lo = 0, port_hi = 65535;
  Proto proto = Proto::kAny;

  bool is_domain() const { return !domain.empty(); }
  bool MatchesName(std::string_view name) const;  // name: lowercased, no trailing dot
  bool MatchesPort(uint16_t port, Proto p) const;
  bool MatchesAddress(int family, const uint8_t* addr, uint16_t port, Proto p) const;
};

struct Policy {
  bool egress = false;
  std::vector<EgressRule> rules;

  // The rules whose domain matches `name` (empty: the name is not allowed).
  std::vector<const EgressRule*> RulesForName(std::string_view name) const;
  // Whether a connection to a literal address is allowed by an address rule.
  bool AllowsAddress(int family, const uint8_t* addr, uint16_t port, Proto p) const;
  // Whether `name` (a host name or an address literal) on `port` is allowed.
  bool AllowsHost(std::string_view host, uint16_t port, Proto p) const;
  std::vector<std::string> Texts() const;
};

Result<EgressRule> ParseRule(std::string_view text);
// mode "none" or "egress"; rules need egress.
Result<Policy> ParsePolicy(std::string_view mode, const std::vector<std::string>& allow);
// Indexes, among the policy's domain rules only, of those that match `name`.
std::vector<size_t> DomainRuleIndexes(const Policy& p, std::string_view name);
// Lowercases and strips one trailing dot; empty if `name` is not a valid DNS name.
std::string NormalizeName(std::string_view name);
// An IPv4/IPv6 literal into family + bytes; false if `s` is not one.
bool ParseAddress(std::string_view s, int* family, std::array<uint8_t, 16>* addr);

}  // namespace warren::net
