// What a node does to the host's IPv6 forwarding switches, on a directory laid out as
// /proc/sys/net: force_forwarding only, recorded once for every node of the host, put back
// by the last one; the global switch is never touched.
#include "net/host_forwarding.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace warren::net {
namespace {

class Forwarding6Test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/forwarding6-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    record_ = dir_ + "/record";
    for (const char* iface : {"all", "default"}) {
      std::filesystem::create_directories(dir_ + "/ipv6/conf/" + iface);
      Set(iface, "disable_ipv6", "0");
      Set(iface, "forwarding", "0");
      Set(iface, "force_forwarding", "0");
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Set(const std::string& iface, const std::string& key, const std::string& v) {
    std::ofstream(dir_ + "/ipv6/conf/" + iface + "/" + key) << v << "\n";
  }
  std::string Get(const std::string& iface, const std::string& key) {
    std::ifstream in(dir_ + "/ipv6/conf/" + iface + "/" + key);
    std::string v;
    in >> v;
    return v;
  }
  std::string dir_, record_;
};

TEST_F(Forwarding6Test, TurnsOnForceForwardingAndTheLastNodePutsItBack) {
  auto first = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, Forwarding6::kWasOff);
  EXPECT_EQ(Get("all", "force_forwarding"), "1");
  EXPECT_EQ(Get("default", "force_forwarding"), "1");
  EXPECT_EQ(Get("all", "forwarding"), "0") << "the global switch (and accept_ra) untouched";
  // A second node finds the switch on, and the record says it was off before either.
  auto second = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, Forwarding6::kWasOff);
  RestoreHostForwarding6(/*others_live=*/true, record_, dir_);
  EXPECT_EQ(Get("all", "force_forwarding"), "1") << "another node still needs it";
  RestoreHostForwarding6(/*others_live=*/false, record_, dir_);
  EXPECT_EQ(Get("all", "force_forwarding"), "0");
  EXPECT_EQ(Get("default", "force_forwarding"), "0");
  EXPECT_FALSE(std::filesystem::exists(record_));
}

TEST_F(Forwarding6Test, AHostThatForwardsAlreadyIsLeftAsItWas) {
  Set("all", "forwarding", "1");
  auto r = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Forwarding6::kWasOn);
  EXPECT_EQ(Get("all", "force_forwarding"), "0");
  RestoreHostForwarding6(false, record_, dir_);
  EXPECT_EQ(Get("all", "forwarding"), "1");

  Set("all", "forwarding", "0");
  Set("all", "force_forwarding", "1");
  r = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Forwarding6::kWasOn);
  RestoreHostForwarding6(false, record_, dir_);
  EXPECT_EQ(Get("all", "force_forwarding"), "1") << "it was on before: it stays on";
}

TEST_F(Forwarding6Test, NoIpv6OrAnOlderKernelMeansNoSandboxIpv6) {
  Set("all", "disable_ipv6", "1");
  auto r = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Forwarding6::kUnavailable);
  Set("all", "disable_ipv6", "0");
  std::filesystem::remove(dir_ + "/ipv6/conf/all/force_forwarding");
  r = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Forwarding6::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(record_)) << "nothing recorded, nothing to put back";
  std::filesystem::remove_all(dir_ + "/ipv6");
  r = TurnOnHostForwarding6(record_, dir_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Forwarding6::kUnavailable);
}

}  // namespace
}  // namespace warren::net
