// The few DNS messages the node's resolver speaks (RFC 1035, RFC 3596): it reads one question
// and answers with A or AAAA records or an error code. Hand-written: c-ares resolves upstream but
// does not parse or build server-side messages, and this subset is small.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/address_ranges.h"

namespace warren::net {

constexpr uint16_t kDnsTypeA = 1, kDnsTypeAAAA = 28;
constexpr uint8_t kRcodeOk = 0, kRcodeFormErr = 1, kRcodeServFail = 2, kRcodeNxDomain = 3,
                  kRcodeNotImp = 4, kRcodeRefused = 5;

struct DnsQuestion {
  uint16_t id = 0;
  uint16_t flags = 0;
  std::string name;  // as asked (dotted, no trailing dot), not yet normalized
  uint16_t qtype = 0, qclass = 0;
  size_t question_end = 0;  // offset just past the question in the query
};

// The first question of a standard query; nullopt if `msg` is not one we can answer
// (a response, another opcode, no question, malformed or compressed names).
std::optional<DnsQuestion> ParseDnsQuery(std::string_view msg);
// A response to `q` (echoing its question from `query`) with `rcode` and, for A, `addrs`
// (network byte order), for AAAA, `addrs6`, each with `ttl`.
std::string BuildDnsResponse(std::string_view query, const DnsQuestion& q, uint8_t rcode,
                             const std::vector<uint32_t>& addrs = {}, uint32_t ttl = 0,
                             const std::vector<Ip6>& addrs6 = {});
// A header-only error answer for a query we could not parse past its id.
std::string BuildDnsError(std::string_view query, uint8_t rcode);

}  // namespace warren::net
