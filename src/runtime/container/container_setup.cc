#include "runtime/container/container_setup.h"

namespace warren::runtime {

agent::SetupMessage ContainerSetupMessage(const SandboxConfig& cfg, const SetupContext& ctx) {
  agent::SetupMessage setup;
  setup.hostname = cfg.hostname;
  setup.disk_bytes = cfg.disk_bytes;
  setup.layers = static_cast<uint32_t>(cfg.layers.size());
  for (size_t i : ToolLayerIndexes(cfg.layers))
    setup.tool_layers.push_back(static_cast<uint32_t>(i));
  // In a namespace of the node's, lo is up already (net/netns.cc); in its own, the agent.
  setup.loopback = cfg.netns_fd < 0;
  for (const auto& [path, data] : cfg.files) setup.files.push_back({path, data, 0644});
  setup.nofile = cfg.open_files;
  setup.landlock = ctx.hardened && !cfg.fncall_runner;
  setup.env = cfg.env;
  setup.sysfs = cfg.sysfs_fd >= 0;
  setup.commands_cgroup = ctx.commands_cgroup;
  setup.listen = true;  // the socket a restarted node reconnects through
  return setup;
}

}  // namespace warren::runtime
