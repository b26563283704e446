// Egress rules, DNS messages, TLS server names and cache classes: the parsing every network
// decision rests on.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "net/cache_policy.h"
#include "net/dns_message.h"
#include "net/policy.h"
#include "net/tls_sni.h"

namespace warren::net {
namespace {

uint32_t A(const char* s) {
  in_addr a{};
  inet_pton(AF_INET, s, &a);
  return a.s_addr;
}

TEST(PackageCacheTest, StoresOnlyAVariantEveryClientTakes) {
  EXPECT_TRUE(OneVariantForAll("", ""));
  EXPECT_TRUE(OneVariantForAll("", "gzip"));  // no Vary: the same bytes for everyone
  EXPECT_TRUE(OneVariantForAll("Accept-Encoding", ""));
  EXPECT_TRUE(OneVariantForAll(" accept-encoding ,Accept-Encoding", "identity"));
  EXPECT_FALSE(OneVariantForAll("Accept-Encoding", "gzip"));
  EXPECT_FALSE(OneVariantForAll("Accept", ""));
  EXPECT_FALSE(OneVariantForAll("Accept-Encoding, Accept", ""));
  // Keyed by Accept (npm packuments, PEP 691 pages): varying by it is what the key holds.
  EXPECT_TRUE(OneVariantForAll("Accept-Encoding, Accept", "", true));
  EXPECT_FALSE(OneVariantForAll("Accept, Accept-Encoding", "gzip", true));
  EXPECT_FALSE(OneVariantForAll("Accept, User-Agent", "", true));
  EXPECT_FALSE(OneVariantForAll("*", ""));
  for (const char* h :
       {"Authorization", "Cookie", "X-JFrog-Art-Api", "Private-Token", "X-Api-Key", "X-Auth-Token",
        "X-Auth-Key", "X-Amz-Security-Token", "X-Goog-Api-Key", "Job-Token"})
    EXPECT_TRUE(MayCarryCredential(h)) << h;
  // What pip, apt and npm send with every download.
  for (const char* h : {"User-Agent",        "Accept",        "Accept-Encoding", "Accept-Language",
                        "Cache-Control",     "Range",         "If-Range",        "If-None-Match",
                        "If-Modified-Since", "Referer",       "npm-auth-type",   "npm-command",
                        "npm-session",       "npm-scope",     "npm-in-ci",       "pacote-version",
                        "pacote-req-type",   "pacote-pkg-id", "Connection",      "Keep-Alive"})
    EXPECT_FALSE(MayCarryCredential(h)) << h;
  EXPECT_TRUE(IdentityEncoded(""));
  EXPECT_TRUE(IdentityEncoded(" Identity "));
  EXPECT_FALSE(IdentityEncoded("gzip"));
  EXPECT_FALSE(IdentityEncoded("br"));
}

TEST(PolicyTest, ParsesRules) {
  auto d = ParseRule("PyPI.org.");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->domain, "pypi.org");
  EXPECT_FALSE(d->wildcard);
  EXPECT_EQ(d->proto, Proto::kAny);
  auto w = ParseRule("*.debian.org:80/tcp");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->wildcard);
  EXPECT_EQ(w->port_lo, 80);
  EXPECT_EQ(w->port_hi, 80);
  EXPECT_EQ(w->proto, Proto::kTcp);
  auto c = ParseRule("10.1.2.3/8:1000-2000/udp");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->family, AF_INET);
  EXPECT_EQ(c->prefix, 8);
  EXPECT_EQ(c->addr[1], 0) << "host bits are cleared";
  EXPECT_EQ(c->port_lo, 1000);
  EXPECT_EQ(c->port_hi, 2000);
  auto v6 = ParseRule("[2001:db8::/32]:443/tcp");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->family, AF_INET6);
  EXPECT_EQ(v6->port_lo, 443);
  auto bare6 = ParseRule("2001:db8::1");
  ASSERT_TRUE(bare6.ok());
  EXPECT_EQ(bare6->prefix, 128);
  auto ip = ParseRule("192.0.2.7");
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(ip->prefix, 32);
}

TEST(PolicyTest, RejectsBadRules) {
  for (const char* bad :
       {"", "*.com", "exa mple.com", "10.0.0.0/33", "10.0.0.0/", "host:0", "host:70000",
        "host:20-10", "host:", "[2001:db8::1", "a..b", "*.", "-/tcp", "x/y"})
    EXPECT_FALSE(ParseRule(bad).ok()) << bad;
  EXPECT_FALSE(ParsePolicy("none", {"pypi.org"}).ok()) << "rules need egress";
  EXPECT_FALSE(ParsePolicy("open", {}).ok());
}

TEST(PolicyTest, MatchesNamesAddressesAndPorts) {
  auto p = ParsePolicy("egress", {"pypi.org", "*.debian.org:80/tcp", "10.0.0.0/8:443/tcp"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->AllowsHost("pypi.org", 443, Proto::kTcp));
  EXPECT_TRUE(p->AllowsHost("PYPI.ORG.", 53, Proto::kUdp));
  EXPECT_FALSE(p->AllowsHost("evil-pypi.org", 443, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("pypi.org.evil.com", 443, Proto::kTcp));
  EXPECT_TRUE(p->AllowsHost("deb.debian.org", 80, Proto::kTcp));
  EXPECT_TRUE(p->AllowsHost("a.b.debian.org", 80, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("debian.org", 80, Proto::kTcp))
      << "*. does not cover the domain itself";
  EXPECT_FALSE(p->AllowsHost("deb.debian.org", 443, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("deb.debian.org", 80, Proto::kUdp));
  EXPECT_TRUE(p->AllowsHost("10.9.8.7", 443, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("10.9.8.7", 80, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("11.0.0.1", 443, Proto::kTcp));
  EXPECT_FALSE(p->AllowsHost("[::1]", 443, Proto::kTcp));
  auto none = ParsePolicy("none", {});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->AllowsHost("pypi.org", 443, Proto::kTcp));
}

std::string Query(const std::string& name, uint16_t qtype, uint16_t id = 0x1234) {
  std::string m = {
      static_cast<char>(id >> 8), static_cast<char>(id & 0xff), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    m.push_back(static_cast<char>(dot - start));
    m += name.substr(start, dot - start);
    start = dot + 1;
  }
  m.push_back(0);
  m += {static_cast<char>(qtype >> 8), static_cast<char>(qtype & 0xff), 0, 1};
  return m;
}

TEST(DnsMessageTest, ParsesAQueryAndAnswersIt) {
  std::string q = Query("Deb.Debian.org", kDnsTypeA);
  auto parsed = ParseDnsQuery(q);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->name, "Deb.Debian.org");
  EXPECT_EQ(parsed->qtype, kDnsTypeA);
  std::string r = BuildDnsResponse(q, *parsed, kRcodeOk, {A("192.0.2.1"), A("192.0.2.2")}, 60);
  EXPECT_EQ(r.substr(0, 2), q.substr(0, 2)) << "same id";
  EXPECT_TRUE(static_cast<uint8_t>(r[2]) & 0x80) << "QR";
  EXPECT_EQ(static_cast<uint8_t>(r[3]) & 0xf, 0);
  EXPECT_EQ(r[7], 2) << "two answers";
  EXPECT_EQ(r.size(), q.size() + 2 * 16);
  EXPECT_EQ(r.substr(r.size() - 4), std::string("\xc0\x00\x02\x02", 4))
      << "the last address, 192.0.2.2";
  std::string nx = BuildDnsResponse(q, *parsed, kRcodeNxDomain);
  EXPECT_EQ(static_cast<uint8_t>(nx[3]) & 0xf, kRcodeNxDomain);
  EXPECT_EQ(nx[7], 0);
}

TEST(DnsMessageTest, AnswersAaaaWithIpv6AddressesOnly) {
  std::string q = Query("v6.example", kDnsTypeAAAA);
  auto parsed = ParseDnsQuery(q);
  ASSERT_TRUE(parsed);
  Ip6 a{};
  ASSERT_EQ(inet_pton(AF_INET6, "2001:db8::7", a.data()), 1);
  std::string r = BuildDnsResponse(q, *parsed, kRcodeOk, {A("192.0.2.1")}, 60, {a});
  EXPECT_EQ(r[7], 1) << "one answer: the AAAA, not the A";
  ASSERT_EQ(r.size(), q.size() + 12 + 16);
  EXPECT_EQ(r.substr(q.size() + 2, 2), std::string("\x00\x1c", 2)) << "type AAAA";
  EXPECT_EQ(r.substr(q.size() + 10, 2), std::string("\x00\x10", 2)) << "16 bytes of data";
  EXPECT_EQ(r.substr(r.size() - 16), std::string(reinterpret_cast<const char*>(a.data()), 16));
  // An A question is answered from the IPv4 addresses alone.
  std::string q4 = Query("v6.example", kDnsTypeA);
  std::string r4 = BuildDnsResponse(q4, *ParseDnsQuery(q4), kRcodeOk, {}, 60, {a});
  EXPECT_EQ(r4[7], 0);
  EXPECT_EQ(r4.size(), q4.size());
}

TEST(DnsMessageTest, RefusesMalformedQueries) {
  std::string q = Query("example.com", kDnsTypeA);
  EXPECT_FALSE(ParseDnsQuery(q.substr(0, 11)));
  EXPECT_FALSE(ParseDnsQuery(q.substr(0, q.size() - 2)));
  std::string response = q;
  response[2] = static_cast<char>(response[2] | 0x80);
  EXPECT_FALSE(ParseDnsQuery(response));
  std::string pointer = q;
  pointer[12] = static_cast<char>(0xc0);
  EXPECT_FALSE(ParseDnsQuery(pointer)) << "compressed names in a question";
  std::string overrun = q;
  overrun[12] = 60;
  EXPECT_FALSE(ParseDnsQuery(overrun));
  EXPECT_EQ(BuildDnsError(q, kRcodeFormErr).size(), 12u);
  EXPECT_TRUE(BuildDnsError("x", kRcodeFormErr).empty());
}

// A minimal TLS 1.2 ClientHello with the server_name extension.
std::string ClientHello(const std::string& host) {
  std::string sni_ext;
  auto u16 = [](std::string* s, size_t v) {
    s->push_back(static_cast<char>(v >> 8)), s->push_back(static_cast<char>(v));
  };
  u16(&sni_ext, 0);  // server_name
  u16(&sni_ext, host.size() + 5);
  u16(&sni_ext, host.size() + 3);
  sni_ext.push_back(0);
  u16(&sni_ext, host.size());
  sni_ext += host;
  std::string body = {3, 3};
  body += std::string(32, 'r');
  body.push_back(0);  // session id
  u16(&body, 2);      // cipher suites
  body += {0x13, 0x01};
  body += {1, 0};  // compression: null
  u16(&body, sni_ext.size());
  body += sni_ext;
  std::string hs = {1, 0, static_cast<char>(body.size() >> 8), static_cast<char>(body.size())};
  hs += body;
  std::string rec = {22, 3, 1};
  u16(&rec, hs.size());
  return rec + hs;
}

TEST(TlsSniTest, FindsTheServerName) {
  std::string hello = ClientHello("pypi.org");
  std::string name;
  EXPECT_EQ(ParseSni(hello, &name), SniResult::kFound);
  EXPECT_EQ(name, "pypi.org");
  EXPECT_EQ(ParseSni(hello.substr(0, 20), &name), SniResult::kNeedMore);
  EXPECT_EQ(ParseSni("GET / HTTP/1.1\r\n", &name), SniResult::kNotTls);
  std::string truncated_ext = hello;
  truncated_ext[truncated_ext.size() - 12] = 0x7f;  // an extension length past the end
  EXPECT_NE(ParseSni(truncated_ext, &name), SniResult::kNeedMore);
}

TEST(PackageCacheTest, ClassifiesPackageFiles) {
  EXPECT_EQ(ClassifyForCache("/debian/pool/main/h/hello/hello_2.10-3_amd64.deb"),
            CacheKind::kImmutable);
  EXPECT_EQ(ClassifyForCache("/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/ab12"),
            CacheKind::kImmutable);
  EXPECT_EQ(ClassifyForCache("/packages/xx/requests-2.31.0-py3-none-any.whl"),
            CacheKind::kImmutable);
  EXPECT_EQ(ClassifyForCache("/left-pad/-/left-pad-1.3.0.tgz"), CacheKind::kImmutable);
  EXPECT_EQ(ClassifyForCache("/debian/dists/bookworm/InRelease"), CacheKind::kIndex);
  EXPECT_EQ(ClassifyForCache("/debian/dists/bookworm/main/binary-amd64/Packages.xz"),
            CacheKind::kIndex);
  EXPECT_EQ(ClassifyForCache("/simple/requests/"), CacheKind::kIndex);
  EXPECT_EQ(ClassifyForCache("/index.html"), CacheKind::kNone);
  EXPECT_EQ(ClassifyForCache("/x.deb?token=1"), CacheKind::kNone);
}

}  // namespace
}  // namespace warren::net
