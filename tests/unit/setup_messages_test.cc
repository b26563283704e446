// The node <-> agent setup, ready and assign messages: round trips, strict parsing (unknown,
// missing and mistyped keys are errors) and the named fd slots.
#include "agent/setup_messages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace warren::agent {
namespace {

using nlohmann::json;

SetupMessage Container() {
  SetupMessage m;
  m.hostname = "sb-1";
  m.disk_bytes = 1 << 30;
  m.layers = 3;
  m.tool_layers = {1};
  m.loopback = true;
  m.files = {{"/etc/resolv.conf", "nameserver 10.0.0.1\n", 0644}};
  m.nofile = 4096;
  m.landlock = true;
  m.env = {{"PATH", "/bin"}};
  m.sysfs = true;
  m.commands_cgroup = true;
  m.listen = true;
  return m;
}

TEST(SetupMessages, RoundTrip) {
  SetupMessage m = Container();
  auto back = ParseSetup(ToJson(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(m));

  SetupMessage vm = Container();
  vm.sysfs = vm.commands_cgroup = vm.listen = false;
  vm.vm = VmSetup{false,
                  {"layer0", "layer1", "layer2"},
                  512 << 20,
                  512,
                  "abcd",
                  123,
                  VmSetup::Net{"10.0.0.2", "10.0.0.1", "02:00:0a:00:00:02"}};
  auto vback = ParseSetup(ToJson(vm));
  ASSERT_TRUE(vback.ok()) << vback.status().ToString();
  EXPECT_EQ(ToJson(*vback), ToJson(vm));
  EXPECT_FALSE(ToJson(vm)["vm"]["net"].contains("ip6")) << "no IPv6: no keys for it";
  vm.vm->net->ip6 = "fd57:6172:7265:6e00::a00:2";
  vm.vm->net->gateway6 = "fd57:6172:7265:6e00::a00:1";
  vback = ParseSetup(ToJson(vm));
  ASSERT_TRUE(vback.ok()) << vback.status().ToString();
  EXPECT_EQ(vback->vm->net->ip6, vm.vm->net->ip6);
  EXPECT_EQ(vback->vm->net->gateway6, vm.vm->net->gateway6);
  json half = ToJson(vm);
  half["vm"]["net"].erase("gateway6");
  EXPECT_EQ(ParseSetup(half).status().code(), Code::kInvalid) << "an address without a gateway";

  // A runner's setup says its dispatcher keeps the root's capabilities; any other's says
  // nothing, and means the agent narrows its bounding set.
  EXPECT_FALSE(ToJson(m).contains("privileged_channel"));
  EXPECT_FALSE(back->privileged_channel);
  SetupMessage runner = Container();
  runner.privileged_channel = true;
  auto rnback = ParseSetup(ToJson(runner));
  ASSERT_TRUE(rnback.ok()) << rnback.status().ToString();
  EXPECT_TRUE(rnback->privileged_channel);
  json mistyped = ToJson(runner);
  mistyped["privileged_channel"] = "yes";
  EXPECT_EQ(ParseSetup(mistyped).status().code(), Code::kInvalid);

  ReadyMessage r{{{"rootfs", 3}, {"pivot", 1}}, 3, ""};
  auto rback = ParseReady(ToJson(r));
  ASSERT_TRUE(rback.ok()) << rback.status().ToString();
  EXPECT_EQ(ToJson(*rback), ToJson(r));

  AssignMessage a{"sb-2", {{"A", "b"}}, 1024};
  auto aback = ParseAssign(ToJson(a));
  ASSERT_TRUE(aback.ok()) << aback.status().ToString();
  EXPECT_EQ(ToJson(*aback), ToJson(a));
}

TEST(SetupMessages, UnknownMissingAndMistypedKeysAreErrorsThatNameTheKey) {
  const json good = ToJson(Container());
  json unknown = good;
  unknown["surprise"] = true;
  auto st = ParseSetup(unknown).status();
  EXPECT_EQ(st.code(), Code::kInvalid);
  EXPECT_NE(st.ToString().find("surprise"), std::string::npos) << st.ToString();
  for (const auto& item : good.items()) {
    json missing = good;
    missing.erase(item.key());
    auto r = ParseSetup(missing);
    EXPECT_FALSE(r.ok()) << item.key();
    if (!r.ok()) {
      EXPECT_NE(r.status().ToString().find(item.key()), std::string::npos) << r.status().ToString();
    }
  }
  for (const char* key : {"hostname", "disk_bytes", "loopback", "nofile", "env", "listen"}) {
    json wrong = good;
    wrong[key] = json::array({1});
    EXPECT_FALSE(ParseSetup(wrong).ok()) << key;
  }
  json tool = good;
  tool["tool_layers"] = {3};  // no fourth layer
  EXPECT_FALSE(ParseSetup(tool).ok());
  json rel = good;
  rel["files"][0]["path"] = "etc/resolv.conf";
  EXPECT_FALSE(ParseSetup(rel).ok());
  EXPECT_FALSE(ParseAssign({{"t", "assign"}, {"hostname", "x"}, {"env", json::object()}}).ok());
  EXPECT_FALSE(
      ParseReady({{"t", "ready"}, {"setup_ms", {{"a", "slow"}}}, {"landlock_abi", 0}}).ok());
}

TEST(SetupMessages, AVmSetupCarriesNoFdSlots) {
  SetupMessage vm = Container();
  vm.vm = VmSetup{false, {"layer0", "layer1", "layer2"}, 1, 1, "s", 1, std::nullopt};
  EXPECT_FALSE(ParseSetup(ToJson(vm)).ok());  // sysfs, commands_cgroup, listen set
  vm.sysfs = vm.commands_cgroup = vm.listen = false;
  vm.vm->layer_serials.pop_back();
  EXPECT_FALSE(ParseSetup(ToJson(vm)).ok());  // a disk short
}

TEST(SetupMessages, FdSlotsGoInOrderAndComeBackByName) {
  SetupMessage m = Container();
  // Distinct real fds so each slot can be told apart by its inode's flags.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::vector<int> layers = {dup(p[0]), dup(p[0]), dup(p[0])};
  const int sysfs = dup(p[1]), cg = open("/dev/null", O_RDONLY),
            listen = open("/dev/zero", O_RDONLY);
  auto order = SetupFdOrder(m, layers, sysfs, cg, listen);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  EXPECT_EQ(*order, (std::vector<int>{layers[0], layers[1], layers[2], sysfs, cg, listen}));
  // A flagged slot without an fd, or the wrong number of layers, is refused.
  EXPECT_FALSE(SetupFdOrder(m, layers, -1, cg, listen).ok());
  EXPECT_FALSE(SetupFdOrder(m, {layers[0]}, sysfs, cg, listen).ok());

  std::vector<UniqueFd> received;
  for (int fd : *order) received.emplace_back(fd);
  auto slots = TakeSetupFds(m, std::move(received));
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  ASSERT_EQ(slots->layers.size(), 3u);
  EXPECT_EQ(slots->sysfs.get(), sysfs);
  EXPECT_EQ(slots->commands_cgroup.get(), cg);
  EXPECT_EQ(slots->listen.get(), listen);

  // Without the sysfs slot, the next fd is the cgroup's, not sysfs's.
  m.sysfs = false;
  std::vector<UniqueFd> two;
  two.emplace_back(open("/dev/null", O_RDONLY));
  two.emplace_back(open("/dev/null", O_RDONLY));
  m.layers = 0;
  auto s2 = TakeSetupFds(m, std::move(two));
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(s2->sysfs.valid());
  EXPECT_TRUE(s2->commands_cgroup.valid() && s2->listen.valid());
  // A count that does not match is refused (nothing is guessed from the back).
  std::vector<UniqueFd> one;
  one.emplace_back(open("/dev/null", O_RDONLY));
  EXPECT_FALSE(TakeSetupFds(m, std::move(one)).ok());
  close(p[0]);
  close(p[1]);
}

TEST(SetupMessages, AVmRefreshRoundTripsAndIsParsedStrictly) {
  VmRefreshMessage m;
  m.hostname = "sb-2";
  m.env = {{"A", "1"}};
  m.seed = "00ff";
  m.now_ns = 1700000000000000000;
  auto back = ParseVmRefresh(ToJson(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->hostname, "sb-2");
  EXPECT_EQ(back->env, m.env);
  EXPECT_FALSE(back->net.has_value());
  m.net = VmSetup::Net{"10.0.0.2", "10.0.0.1", "02:57:0a:00:00:02"};
  back = ParseVmRefresh(ToJson(m));
  ASSERT_TRUE(back.ok() && back->net.has_value());
  EXPECT_EQ(back->net->mac, "02:57:0a:00:00:02");
  nlohmann::json bad = ToJson(m);
  bad["extra"] = 1;
  EXPECT_NE(ParseVmRefresh(bad).status().ToString().find("extra"), std::string::npos);
  bad = ToJson(m);
  bad["seed"] = "xyz";
  EXPECT_FALSE(ParseVmRefresh(bad).ok());
  bad = ToJson(m);
  bad.erase("now_ns");
  EXPECT_FALSE(ParseVmRefresh(bad).ok());
}

}  // namespace
}  // namespace warren::agent
