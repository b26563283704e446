// Which addresses public DNS may lead a sandbox to, for IPv4 and IPv6, and the operator's
// hosts file of both families.
#include "net/address_ranges.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "net/resolver.h"

namespace warren::net {
namespace {

uint32_t A(const char* s) {
  in_addr a{};
  EXPECT_EQ(inet_pton(AF_INET, s, &a), 1) << s;
  return a.s_addr;
}

Ip6 A6(const char* s) {
  Ip6 a{};
  EXPECT_EQ(inet_pton(AF_INET6, s, a.data()), 1) << s;
  return a;
}

TEST(AddressRangesTest, InternalIpv4) {
  for (const char* s : {"10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.1",
                        "169.254.169.254", "0.1.2.3", "224.0.0.1", "240.0.0.1", "168.63.129.16"})
    EXPECT_TRUE(IsInternalAddress(A(s))) << s;
  for (const char* s : {"8.8.8.8", "151.101.0.223", "104.16.0.35", "172.32.0.1"})
    EXPECT_FALSE(IsInternalAddress(A(s))) << s;
}

TEST(AddressRangesTest, SandboxIpv6IsItsIpv4InTheNodesPrefix) {
  EXPECT_EQ(Ip6String(SandboxAddress6(A("10.89.0.7"))), "fd57:6172:7265:6e00::a59:7");
  EXPECT_EQ(SandboxAddress6(A("10.89.0.7")), A6("fd57:6172:7265:6e00::10.89.0.7"));
  // Unique-local: internal to public DNS, and never one of the ranges no rule opens.
  EXPECT_TRUE(IsInternalAddress6(SandboxAddress6(A("10.89.0.7"))));
  EXPECT_FALSE(IsNeverReachable6(SandboxAddress6(A("10.89.0.7"))));
  EXPECT_FALSE(EmbeddedIpv4(SandboxAddress6(A("10.89.0.7"))));
}

TEST(AddressRangesTest, InternalIpv6) {
  for (const char* s : {"::", "::1", "fd00::2", "fc12::1", "fe80::1", "fec0::1", "ff02::1",
                        "100::1", "2001:db8::1", "2001::1", "3fff::1", "64:ff9b:1::a"})
    EXPECT_TRUE(IsInternalAddress6(A6(s))) << s;
  // An address standing for an IPv4 one is as internal as that one.
  for (const char* s : {"::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1",
                        "2002:c0a8:0101::1", "::10.0.0.1"})
    EXPECT_TRUE(IsInternalAddress6(A6(s))) << s;
  for (const char* s : {"2606:4700::6810:84e5", "2a04:4e42::223", "::ffff:8.8.8.8",
                        "64:ff9b::808:808", "2002:0808:0808::1"})
    EXPECT_FALSE(IsInternalAddress6(A6(s))) << s;
}

TEST(AddressRangesTest, NeverReachableIpv6) {
  for (const char* s :
       {"::", "::1", "::10.0.0.1", "::ffff:8.8.8.8", "fe80::1", "fec0::1", "ff02::1"})
    EXPECT_TRUE(IsNeverReachable6(A6(s))) << s;
  for (const char* s : {"fd00::2", "2606:4700::1", "64:ff9b::7f00:1", "::fffe:10.0.0.1"})
    EXPECT_FALSE(IsNeverReachable6(A6(s))) << s;
}

TEST(AddressRangesTest, EmbeddedIpv4) {
  EXPECT_EQ(EmbeddedIpv4(A6("::ffff:169.254.169.254")), A("169.254.169.254"));
  EXPECT_EQ(EmbeddedIpv4(A6("::127.0.0.1")), A("127.0.0.1"));
  EXPECT_EQ(EmbeddedIpv4(A6("64:ff9b::10.1.2.3")), A("10.1.2.3"));
  EXPECT_EQ(EmbeddedIpv4(A6("2002:0a01:0203:1::5")), A("10.1.2.3"));
  EXPECT_EQ(EmbeddedIpv4(A6("::1")), A("0.0.0.1"));
  EXPECT_FALSE(EmbeddedIpv4(A6("2606:4700::1")));
  EXPECT_FALSE(EmbeddedIpv4(A6("::fffe:10.0.0.1")));
}

class HostsFile {
 public:
  explicit HostsFile(const std::string& text) {
    char tmpl[] = "/tmp/warren-hosts-XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~HostsFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ResolverTest, HostsFileHoldsBothFamilies) {
  HostsFile f(
      "# operator overrides\n"
      "10.251.0.2 pkg.test dual.test\n"
      "fd77:251::2 v6.test dual.test  # an IPv6-only name and a second family\n"
      "::1 ip6-localhost\n");
  auto r = Resolver::Create(f.path(), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v6 = (*r)->Resolve("v6.test");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_TRUE(v6->addrs.empty());
  ASSERT_EQ(v6->addrs6.size(), 1u);
  EXPECT_EQ(v6->addrs6[0], A6("fd77:251::2"));
  EXPECT_TRUE(v6->trusted);
  EXPECT_GT(v6->ttl_s, 0u);
  auto dual = (*r)->Resolve("dual.test");
  ASSERT_TRUE(dual.ok());
  EXPECT_EQ(dual->addrs, std::vector<uint32_t>{A("10.251.0.2")});
  EXPECT_EQ(dual->addrs6.size(), 1u);
  auto v4 = (*r)->Resolve("pkg.test");
  ASSERT_TRUE(v4.ok());
  EXPECT_TRUE(v4->addrs6.empty());
}

TEST(ResolverTest, HostsFileWithABadAddressIsRefusedNamingTheLine) {
  HostsFile f("10.0.0.1 ok.test\nnot-an-address bad.test\n");
  auto r = Resolver::Create(f.path(), "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("line 2"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace warren::net
