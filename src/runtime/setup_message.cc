#include "runtime/setup_message.h"

namespace warren::runtime {

agent::SetupMessage CommonSetup(const SandboxConfig& cfg) {
  agent::SetupMessage setup;
  setup.hostname = cfg.hostname;
  setup.disk_bytes = cfg.disk_bytes;
  setup.layers = static_cast<uint32_t>(cfg.layers.size());
  for (size_t i : ToolLayerIndexes(cfg.layers))
    setup.tool_layers.push_back(static_cast<uint32_t>(i));
  for (const auto& [path, data] : cfg.files) setup.files.push_back({path, data, 0644});
  setup.nofile = cfg.open_files;
  setup.env = cfg.env;
  // Only a runner's dispatcher keeps the sandbox root's capabilities (node/fncall/runner.cc).
  setup.privileged_channel = cfg.fncall_runner;
  return setup;
}

agent::SetupMessage ContainerSetupMessage(const SandboxConfig& cfg, const SetupContext& ctx) {
  agent::SetupMessage setup = CommonSetup(cfg);
  // In a namespace of the node's, lo is up already (net/netns.cc); in its own, the agent.
  setup.loopback = cfg.netns_fd < 0;
  setup.landlock = ctx.hardened && !cfg.fncall_runner;
  setup.sysfs = cfg.sysfs_fd >= 0;
  setup.commands_cgroup = ctx.commands_cgroup;
  setup.listen = true;  // the socket a restarted node reconnects through
  return setup;
}

}  // namespace warren::runtime
