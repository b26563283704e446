#include "net/policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "net/address_ranges.h"

namespace warren::net {
namespace {

bool ParsePort(std::string_view s, uint16_t* out) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > 65535 || s.empty()) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

std::string NormalizeName(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253) return "";
  std::string out;
  out.reserve(name.size());
  size_t label = 0;
  for (char c : name) {
    char l = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (l == '.') {
      if (label == 0 || out.back() == '-') return "";  // empty label, or one ending in '-'
      label = 0;
    } else if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '_' ||
               (l == '-' && label > 0)) {
      if (++label > 63) return "";
    } else {
      return "";
    }
    out.push_back(l);
  }
  return label == 0 || out.back() == '-' ? "" : out;
}

bool ParseAddress(std::string_view s, int* family, std::array<uint8_t, 16>* addr) {
  std::string str(s);
  addr->fill(0);
  if (inet_pton(AF_INET, str.c_str(), addr->data()) == 1) return *family = AF_INET, true;
  if (inet_pton(AF_INET6, str.c_str(), addr->data()) == 1) return *family = AF_INET6, true;
  return false;
}

Result<EgressRule> ParseRule(std::string_view text) {
  EgressRule r;
  r.text = std::string(text);
  auto bad = [&](const std::string& why) {
    return Invalid("bad network rule `" + r.text + "`: " + why +
                   " (want a domain, *.domain or CIDR, then optional :port[-port] and /tcp|/udp)");
  };
  std::string_view s = text;
  if (s.empty()) return bad("empty");
  // Protocol suffix.
  if (s.size() > 4 && (s.ends_with("/tcp") || s.ends_with("/udp"))) {
    r.proto = s.ends_with("/tcp") ? Proto::kTcp : Proto::kUdp;
    s.remove_suffix(4);
  }
  // Host part and optional port part.
  std::string_view host = s, port;
  if (s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    host = s.substr(1, close - 1);
    std::string_view after = s.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected :port after ]");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else if (std::count(s.begin(), s.end(), ':') == 1) {
    size_t colon = s.find(':');
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (port.empty()) return bad("empty port");
  }  // several colons without brackets: a bare IPv6 address or CIDR
  if (!port.empty()) {
    size_t dash = port.find('-');
    if (dash == std::string_view::npos) {
      if (!ParsePort(port, &r.port_lo) || r.port_lo == 0) return bad("bad port");
      r.port_hi = r.port_lo;
    } else if (!ParsePort(port.substr(0, dash), &r.port_lo) ||
               !ParsePort(port.substr(dash + 1), &r.port_hi) || r.port_lo == 0 ||
               r.port_lo > r.port_hi) {
      return bad("bad port range");
    }
  }  // "/tcp" with no port: every port of that protocol
  // Address or CIDR?
  std::string_view addr_part = host;
  std::string_view prefix_part;
  if (size_t slash = host.find('/'); slash != std::string_view::npos) {
    addr_part = host.substr(0, slash);
    prefix_part = host.substr(slash + 1);
  }
  if (ParseAddress(addr_part, &r.family, &r.addr)) {
    int max = r.family == AF_INET ? 32 : 128;
    r.prefix = max;
    if (!prefix_part.empty()) {
      uint16_t p;
      if (!ParsePort(prefix_part, &p) || p > max) return bad("bad prefix length");
      r.prefix = p;
    } else if (host.find('/') != std::string_view::npos) {
      return bad("empty prefix length");
    }
    // Canonical: host bits cleared, so "10.1.2.3/8" means 10.0.0.0/8.
    for (int bit = r.prefix; bit < max; ++bit)
      r.addr[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
    return r;
  }
  if (!prefix_part.empty() || host.find('/') != std::string_view::npos)
    return bad("not an address");
  std::string_view name = host;
  if (name.starts_with("*.")) {
    r.wildcard = true;
    name.remove_prefix(2);
  }
  r.domain = NormalizeName(name);
  if (r.domain.empty()) return bad("not a valid domain name");
  if (r.wildcard && r.domain.find('.') == std::string::npos)
    return bad("a wildcard needs at least two labels (e.g. *.example.com)");
  return r;
}

bool EgressRule::MatchesName(std::string_view name) const {
  if (!is_domain()) return false;
  if (!wildcard) return name == domain;
  return name.size() > domain.size() + 1 && name.ends_with(domain) &&
         name[name.size() - domain.size() - 1] == '.';
}

bool EgressRule::MatchesPort(uint16_t port, Proto p) const {
  if (proto != Proto::kAny && p != proto) return false;
  return port >= port_lo && port <= port_hi;
}

bool EgressRule::MatchesAddress(int fam, const uint8_t* a, uint16_t port, Proto p) const {
  if (is_domain() || fam != family) return false;
  return PrefixMatches(a, addr.data(), prefix) && MatchesPort(port, p);
}

std::vector<const EgressRule*> Policy::RulesForName(std::string_view name) const {
  std::vector<const EgressRule*> out;
  if (!egress) return out;
  for (const auto& r : rules)
    if (r.MatchesName(name)) out.push_back(&r);
  return out;
}

bool Policy::AllowsAddress(int fam, const uint8_t* a, uint16_t port, Proto p) const {
  if (!egress) return false;
  for (const auto& r : rules)
    if (r.MatchesAddress(fam, a, port, p)) return true;
  return false;
}

bool Policy::AllowsHost(std::string_view host, uint16_t port, Proto p) const {
  if (!egress) return false;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int fam;
  std::array<uint8_t, 16> a;
  if (ParseAddress(host, &fam, &a)) return AllowsAddress(fam, a.data(), port, p);
  std::string name = NormalizeName(host);
  if (name.empty()) return false;
  for (const EgressRule* r : RulesForName(name))
    if (r->MatchesPort(port, p)) return true;
  return false;
}

std::vector<std::string> Policy::Texts() const {
  std::vector<std::string> out;
  for (const auto& r : rules) out.push_back(r.text);
  return out;
}

std::vector<size_t> DomainRuleIndexes(const Policy& p, std::string_view name) {
  std::vector<size_t> out;
  if (!p.egress) return out;
  size_t k = 0;
  for (const auto& r : p.rules) {
    if (!r.is_domain()) continue;
    if (r.MatchesName(name)) out.push_back(k);
    ++k;
  }
  return out;
}

Result<Policy> ParsePolicy(std::string_view mode, const std::vector<std::string>& allow) {
  Policy p;
  if (mode == "egress")
    p.egress = true;
  else if (mode != "none")
    return Invalid("`network.mode` must be none or egress");
  if (!p.egress && !allow.empty())
    return Invalid("`network.allow` rules need `network.mode` egress");
  if (allow.size() > 256) return Invalid("`network.allow` takes at most 256 rules");
  for (const auto& a : allow) p.rules.push_back(WARREN_TRY(ParseRule(a)));
  return p;
}

}  // namespace warren::net
