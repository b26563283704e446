// The setup message a backend sends for a sandbox config: what the agent is told to do, and
// that the agent's strict parser takes it back unchanged.
#include "runtime/setup_message.h"

#include <gtest/gtest.h>

namespace warren::runtime {
namespace {

SandboxConfig Config() {
  SandboxConfig cfg;
  cfg.id = cfg.hostname = "sb-setup";
  cfg.layers = {{"sha256:ws", "/blobs/ws", false},
                {"sha256:tool", "/blobs/tool", true},
                {"sha256:base", "/blobs/base", false}};
  cfg.disk_bytes = 2ull << 30;
  cfg.open_files = 1024;
  cfg.env = {{"LANG", "C.UTF-8"}};
  cfg.files = {{"/etc/pip.conf", "[global]\n"}};
  return cfg;
}

TEST(ContainerSetup, ASandboxInItsOwnNamespaceGetsEverythingItsConfigSays) {
  const auto m = ContainerSetupMessage(Config(), {.hardened = true, .commands_cgroup = true});
  EXPECT_EQ(m.hostname, "sb-setup");
  EXPECT_EQ(m.layers, 3u);
  EXPECT_EQ(m.tool_layers, std::vector<uint32_t>{1});
  EXPECT_TRUE(m.loopback);  // no namespace of the node's: the agent brings lo up
  EXPECT_FALSE(m.sysfs);
  EXPECT_TRUE(m.landlock);
  EXPECT_TRUE(m.commands_cgroup);
  EXPECT_TRUE(m.listen);
  EXPECT_EQ(m.nofile, 1024u);
  EXPECT_EQ(m.disk_bytes, 2ull << 30);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].mode, 0644u);
  EXPECT_FALSE(m.vm.has_value());
  // The agent's parser takes it back as sent, and the fds go in their named slots.
  auto back = agent::ParseSetup(agent::ToJson(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(agent::ToJson(*back), agent::ToJson(m));
  auto fds = agent::SetupFdOrder(m, {10, 11, 12}, -1, 13, 14);
  ASSERT_TRUE(fds.ok()) << fds.status().ToString();
  EXPECT_EQ(*fds, (std::vector<int>{10, 11, 12, 13, 14}));
}

TEST(ContainerSetup, ANodeNamespaceBringsItsSysfsAndItsOwnLoopback) {
  auto cfg = Config();
  cfg.netns_fd = 7;
  cfg.sysfs_fd = 8;
  const auto m = ContainerSetupMessage(cfg, {.hardened = true, .commands_cgroup = false});
  EXPECT_FALSE(m.loopback);  // the node's namespace has lo up already
  EXPECT_TRUE(m.sysfs);
  EXPECT_FALSE(m.commands_cgroup);
  auto fds = agent::SetupFdOrder(m, {10, 11, 12}, 8, -1, 14);
  ASSERT_TRUE(fds.ok()) << fds.status().ToString();
  EXPECT_EQ(*fds, (std::vector<int>{10, 11, 12, 8, 14}));
}

TEST(ContainerSetup, EveryBackendSaysTheCommonPartAlike) {
  const auto common = CommonSetup(Config());
  auto container = ContainerSetupMessage(Config(), {.hardened = true});
  EXPECT_EQ(container.hostname, common.hostname);
  EXPECT_EQ(container.tool_layers, common.tool_layers);
  EXPECT_EQ(container.env, common.env);
  EXPECT_EQ(container.files.size(), common.files.size());
  EXPECT_FALSE(common.landlock);  // each backend decides it
  EXPECT_FALSE(common.listen);
}

TEST(ContainerSetup, LandlockIsOffOnlyForRunnersAndBenchmarkNodes) {
  auto runner = Config();
  runner.fncall_runner = true;  // its zygote makes each call's namespaces
  EXPECT_FALSE(ContainerSetupMessage(runner, {.hardened = true}).landlock);
  EXPECT_FALSE(ContainerSetupMessage(Config(), {.hardened = false}).landlock);
  EXPECT_TRUE(ContainerSetupMessage(Config(), {.hardened = true}).landlock);
}

}  // namespace
}  // namespace warren::runtime
