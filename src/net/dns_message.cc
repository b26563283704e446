#include "net/dns_message.h"

namespace warren::net {
namespace {

uint16_t Get16(std::string_view m, size_t off) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[off]) << 8) |
                               static_cast<uint8_t>(m[off + 1]));
}
void Put16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v >> 16));
  Put16(out, static_cast<uint16_t>(v & 0xffff));
}

}  // namespace

std::optional<DnsQuestion> ParseDnsQuery(std::string_view m) {
  if (m.size() < 12 || m.size() > 4096) return std::nullopt;
  DnsQuestion q;
  q.id = Get16(m, 0);
  q.flags = Get16(m, 2);
  const bool is_response = q.flags & 0x8000;
  const int opcode = (q.flags >> 11) & 0xf;
  if (is_response || opcode != 0 || Get16(m, 4) != 1) return std::nullopt;
  size_t off = 12;
  for (;;) {
    if (off >= m.size()) return std::nullopt;
    uint8_t len = static_cast<uint8_t>(m[off++]);
    if (len == 0) break;
    if (len > 63 || off + len > m.size()) return std::nullopt;  // also rejects pointers
    if (!q.name.empty()) q.name.push_back('.');
    q.name.append(m.substr(off, len));
    off += len;
    if (q.name.size() > 253) return std::nullopt;
  }
  if (off + 4 > m.size()) return std::nullopt;
  q.qtype = Get16(m, off);
  q.qclass = Get16(m, off + 2);
  q.question_end = off + 4;
  return q;
}

std::string BuildDnsResponse(std::string_view query, const DnsQuestion& q, uint8_t rcode,
                             const std::vector<uint32_t>& addrs, uint32_t ttl,
                             const std::vector<Ip6>& addrs6) {
  std::string out;
  Put16(&out, q.id);
  // QR, the query's opcode (0) and RD, RA (we recurse), the code.
  Put16(&out, static_cast<uint16_t>(0x8000 | (q.flags & 0x0100) | 0x0080 | (rcode & 0xf)));
  const bool ok = rcode == kRcodeOk;
  const size_t count = !ok                       ? 0
                       : q.qtype == kDnsTypeA    ? addrs.size()
                       : q.qtype == kDnsTypeAAAA ? addrs6.size()
                                                 : 0;
  Put16(&out, 1);                             // QDCOUNT
  Put16(&out, static_cast<uint16_t>(count));  // ANCOUNT
  Put16(&out, 0);                             // NSCOUNT
  Put16(&out, 0);                             // ARCOUNT
  out.append(query.substr(12, q.question_end - 12));
  auto record = [&](uint16_t type, const void* data, uint16_t size) {
    Put16(&out, 0xc00c);  // the name: a pointer to the question's
    Put16(&out, type);
    Put16(&out, 1);  // IN
    Put32(&out, ttl);
    Put16(&out, size);
    out.append(static_cast<const char*>(data), size);  // already network order
  };
  if (count && q.qtype == kDnsTypeA)
    for (uint32_t a : addrs) record(kDnsTypeA, &a, 4);
  if (count && q.qtype == kDnsTypeAAAA)
    for (const Ip6& a : addrs6) record(kDnsTypeAAAA, a.data(), 16);
  return out;
}

std::string BuildDnsError(std::string_view query, uint8_t rcode) {
  std::string out;
  if (query.size() < 2) return out;
  out.append(query.substr(0, 2));
  Put16(&out, static_cast<uint16_t>(0x8000 | 0x0080 | (rcode & 0xf)));
  for (int i = 0; i < 4; ++i) Put16(&out, 0);
  return out;
}

}  // namespace warren::net
