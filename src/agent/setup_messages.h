// The typed messages that make a sandbox: `setup` (node -> agent, once), `ready` (agent ->
// node), `assign` (node -> a warm sandbox's agent). Both ends use these structs; parsing is
// strict: an unknown key, a missing one or a wrong type is an error naming it, never a silent
// default. protocol.h lists the other messages.
//
// File descriptors travel with `setup` (SCM_RIGHTS) in one fixed order of named slots: the
// layer mounts (top layer first, `layers` of them), then sysfs, the commands' cgroup.procs
// and the listening socket, each present exactly when its flag is set. SetupFdOrder() lays
// them out on the node; TakeSetupFds() hands them back by name in the agent, refusing a count
// that does not match.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::agent {

// A file the node wants in the sandbox before any command runs (resolver, proxy settings).
struct SetupFile {
  std::string path;
  std::string data;
  uint32_t mode = 0644;
};

// What only a microVM or whole VM's setup has: its layers are disks, its limits its own.
struct VmSetup {
  struct Net {
    std::string ip, gateway, mac;
    std::string ip6, gateway6;  // empty: no IPv6 (the node gives sandboxes none)
  };
  bool full_os = false;
  std::vector<std::string> layer_serials;  // the disks' serials, top layer first
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  std::string seed;    // fresh randomness (a restored template's is shared)
  int64_t now_ns = 0;  // the node's realtime clock
  std::optional<Net> net;
};

struct SetupMessage {
  std::string hostname;
  uint64_t disk_bytes = 0;
  uint32_t layers = 0;                // layer fds (container) or disks (VM)
  std::vector<uint32_t> tool_layers;  // indexes into the layers: tool layers, guarded read-only
  bool loopback = false;              // bring lo up (a namespace the agent owns)
  std::vector<SetupFile> files;
  uint64_t nofile = 4096;  // RLIMIT_NOFILE of every command
  bool landlock = false;
  std::map<std::string, std::string> env;
  // The named fd slots after the layers (containers; a VM gets none).
  bool sysfs = false;
  bool commands_cgroup = false;
  bool listen = false;
  // The node will start a channel command that keeps the sandbox root's capabilities (an
  // fncall runner's dispatcher). Otherwise the agent narrows its bounding set as it seals the
  // sandbox, once for every command it starts.
  bool privileged_channel = false;
  std::optional<VmSetup> vm;
};

nlohmann::json ToJson(const SetupMessage& m);  // the header, with "t": "setup"
Result<SetupMessage> ParseSetup(const nlohmann::json& header);

// The fds of a setup, by slot.
struct SetupFds {
  std::vector<UniqueFd> layers;
  UniqueFd sysfs, commands_cgroup, listen;
};
// The node's side: the fds to send, in slot order; -1 for a flagged slot is an error.
Result<std::vector<int>> SetupFdOrder(const SetupMessage& m, const std::vector<int>& layers,
                                      int sysfs, int commands_cgroup, int listen);
// The agent's side: `fds` as received, assigned to their slots.
Result<SetupFds> TakeSetupFds(const SetupMessage& m, std::vector<UniqueFd> fds);

struct ReadyMessage {
  std::map<std::string, int64_t> setup_ms;  // where setup's time went
  int landlock_abi = 0;                     // 0: none applied
  std::string init;                         // a whole VM: what runs as its init ("systemd")
};
nlohmann::json ToJson(const ReadyMessage& m);
Result<ReadyMessage> ParseReady(const nlohmann::json& header);

// A warm sandbox handed to a create: that create's identity.
struct AssignMessage {
  std::string hostname;
  std::map<std::string, std::string> env;
  uint64_t nofile = 4096;
};
nlohmann::json ToJson(const AssignMessage& m);
Result<AssignMessage> ParseAssign(const nlohmann::json& header);

// A microVM forked with its memory (issue 30) carries its parent's identity in RAM: the node
// gives each child its own before anything else runs. The seed replaces the parent's CRNG
// state, the clock stood still while the parent was copied, and a wired child has its own
// address and MAC.
struct VmRefreshMessage {
  std::string hostname;
  std::map<std::string, std::string> env;  // the commands' base environment
  std::string seed;
  int64_t now_ns = 0;
  std::optional<VmSetup::Net> net;
};
nlohmann::json ToJson(const VmRefreshMessage& m);
Result<VmRefreshMessage> ParseVmRefresh(const nlohmann::json& header);

}  // namespace warren::agent
