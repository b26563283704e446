#include "net/address_ranges.h"

#include <arpa/inet.h>

#include <cstring>

namespace warren::net {

bool PrefixMatches(const uint8_t* a, const uint8_t* b, int prefix) {
  const int full = prefix / 8, rest = prefix % 8;
  if (memcmp(a, b, static_cast<size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

Ip6 SandboxAddress6(uint32_t addr) {
  Ip6 a = kSandboxPrefix6;
  memcpy(a.data() + 12, &addr, 4);
  return a;
}

std::string Ip6String(const Ip6& addr) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, addr.data(), buf, sizeof buf);
  return buf;
}

bool IsInternalAddress(uint32_t addr) {
  const uint32_t a = ntohl(addr);
  struct Net {
    uint32_t net;
    int prefix;
  };
  static constexpr Net kNets[] = {
      {0x0a000000, 8},  {0xac100000, 12}, {0xc0a80000, 16}, {0x64400000, 10}, {0xc0000000, 24},
      {0xc6120000, 15}, {0xf0000000, 4},  {0xa83f8110, 32},  // 168.63.129.16 (Azure)
      {0x7f000000, 8},  {0xa9fe0000, 16}, {0x00000000, 8},  {0xe0000000, 3}};
  for (const Net& n : kNets)
    if ((a >> (32 - n.prefix)) == (n.net >> (32 - n.prefix))) return true;
  return false;
}

namespace {

struct Net6 {
  Ip6 net;
  int prefix;
};

constexpr Ip6 Bytes(std::initializer_list<uint8_t> head) {
  Ip6 a{};
  size_t i = 0;
  for (uint8_t b : head) a[i++] = b;
  return a;
}

template <size_t N>
bool InAny(const Ip6& a, const Net6 (&nets)[N]) {
  for (const Net6& n : nets)
    if (PrefixMatches(a.data(), n.net.data(), n.prefix)) return true;
  return false;
}

uint32_t V4At(const Ip6& a, size_t at) {
  uint32_t v;
  memcpy(&v, a.data() + at, 4);
  return v;
}

}  // namespace

std::optional<uint32_t> EmbeddedIpv4(const Ip6& a) {
  static constexpr Ip6 kZero{};
  static constexpr Ip6 kMapped = Bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff});
  static constexpr Ip6 kNat64 = Bytes({0x00, 0x64, 0xff, 0x9b});
  static constexpr Ip6 k6to4 = Bytes({0x20, 0x02});
  if (PrefixMatches(a.data(), kMapped.data(), 96) || PrefixMatches(a.data(), kZero.data(), 96) ||
      PrefixMatches(a.data(), kNat64.data(), 96))
    return V4At(a, 12);
  if (PrefixMatches(a.data(), k6to4.data(), 16)) return V4At(a, 2);
  return std::nullopt;
}

bool IsNeverReachable6(const Ip6& a) {
  static constexpr Net6 kNets[] = {
      {Bytes({}), 96},                                          // ::, ::1, v4-compatible
      {Bytes({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}), 96},  // v4-mapped
      {Bytes({0xfe, 0x80}), 10},                                // link-local
      {Bytes({0xfe, 0xc0}), 10},                                // site-local (deprecated)
      {Bytes({0xff}), 8},                                       // multicast
  };
  return InAny(a, kNets);
}

bool IsInternalAddress6(const Ip6& a) {
  if (auto v4 = EmbeddedIpv4(a)) return IsInternalAddress(*v4);
  if (IsNeverReachable6(a)) return true;  // link- and site-local, multicast
  static constexpr Net6 kNets[] = {
      {Bytes({0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}), 48},  // NAT64, local use
      {Bytes({0x01, 0x00}), 64},                          // discard-only
      {Bytes({0x20, 0x01, 0x00, 0x00}), 23},              // IETF protocols (Teredo, ...)
      {Bytes({0x20, 0x01, 0x0d, 0xb8}), 32},              // documentation
      {Bytes({0x3f, 0xff}), 20},                          // documentation (RFC 9637)
      {Bytes({0xfc}), 7},                                 // unique local
  };
  return InAny(a, kNets);
}

}  // namespace warren::net
