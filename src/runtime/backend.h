// The Backend interface: what the node asks of every kind of sandbox (container, and fncall
// runners, which are container sandboxes; microvm and vm, which are QEMU guests of one
// backend). A backend makes a sandbox with the warren-agent running inside and hands back its
// control socket; everything after that (exec, files) speaks the agent protocol and is the
// same for every backend. A `backend: fncall` sandbox is not made here at all: it is a record
// of node/fncall/fncall_sandboxes.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/display.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "isolation/cgroup_memory.h"
#include "isolation/fs_policy.h"
#include "isolation/layer_tree.h"
#include "isolation/overlay_changes.h"

namespace warren::runtime {

namespace vm {
struct MemoryImage;  // runtime/vm/microvm_backend.h
}

struct LayerRef {
  std::string digest;     // "sha256:..."
  std::string blob_path;  // local EROFS file (a chunked layer's: its metadata image)
  bool tool = false;      // a tool layer: its files are guarded read-only (isolation/tool_guard.h)
  std::string device_path;  // a chunked layer's blob file (blobfsd's), else empty
  // The mount's readahead when not the kernel's default: set for a layer read on demand.
  std::optional<uint32_t> readahead_kb;
};

// Positions of the tool layers in `layers` (the agent's `tool_layers`).
inline std::vector<size_t> ToolLayerIndexes(const std::vector<LayerRef>& layers) {
  std::vector<size_t> out;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].tool) out.push_back(i);
  return out;
}

struct SandboxConfig {
  std::string id;
  std::string hostname;
  std::vector<LayerRef> layers;  // top (workspace) first, base last
  uint64_t memory_bytes = 512ull << 20;
  uint64_t disk_bytes = 1ull << 30;
  uint64_t pids = 512;
  double cpus = 1.0;
  uint64_t open_files = 4096;  // RLIMIT_NOFILE of every command
  std::map<std::string, std::string> env;
  // A node-internal fncall runner (see node/fncall/runner.h): the runner seccomp profile
  // and no sandbox-wide Landlock, so its zygote can make each call's namespaces.
  bool fncall_runner = false;
  // A network namespace the node made (net/netns.h) to run the sandbox in, or -1 for a new
  // one of its own with only lo (fncall runners; hosts without sandbox networking).
  int netns_fd = -1;
  int sysfs_fd = -1;  // with netns_fd: a detached sysfs of that namespace, for /sys
  // microVMs: the sandbox's address and gateway (network byte order) when its namespace has an
  // egress link (eth0) to bridge the VM's NIC to; 0: no link.
  uint32_t net_ip = 0, net_gateway = 0;
  // With net_ip, when the node gives sandboxes IPv6: the guest's IPv6 address and gateway.
  std::string net_ip6, net_gateway6;
  // Backend vm: a full OS (q35, the image's own init) rather than a microVM.
  bool full_os = false;
  // Files the agent writes into the sandbox before it is ready: (path, content), mode 0644.
  std::vector<std::pair<std::string, std::string>> files;
  // Made ahead of demand by a warm pool (node/warm_pool.h): its agent sets up at the lowest
  // CPU priority, so filling the pool never slows the work that is asked for now.
  bool background = false;
  // A desktop sandbox: its agent starts the image's X server at this size once it is ready.
  std::optional<agent::DisplaySize> display;
  // A microVM forked with its memory (issue 30): the parent's RAM and devices to restore,
  // in place of booting or a template. Its layers are the parent's.
  std::shared_ptr<const vm::MemoryImage> memory;
};

// What a warm sandbox is given when a create takes it (see Instance::Claim).
struct ClaimSpec {
  std::string id;
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  double cpus = 0;
};

// A live sandbox. Destroying it kills every process in it and releases everything it held.
class Instance {
 public:
  virtual ~Instance() = default;
  // The node's end of the agent's control socket (SOCK_SEQPACKET). Taken once.
  virtual UniqueFd TakeControlSocket() = 0;
  // Kills and releases everything; idempotent. Safe to call from any thread.
  virtual Status Destroy() = 0;
  // Freezes / thaws every process of the sandbox.
  virtual Status Pause() = 0;
  virtual Status Resume() = 0;
  // A sandbox made ahead of demand under a pool name becomes sandbox `spec.id`: its limits
  // are rewritten, what a restarted node finds it by is renamed, its priority is restored.
  // (The agent's side, hostname and environment, is the node's message.)
  virtual Status Claim(const ClaimSpec& spec) {
    return Status(Code::kUnavailable, "claim", spec.id, "not supported by this backend");
  }
  // Applies a filesystem policy (isolation/fs_policy.h) at once to every process of the
  // sandbox, running or not, root included.
  virtual Status SetFilesystemPolicy(const isolation::FsPolicy&) {
    return Status(Code::kUnavailable, "set filesystem policy", "sandbox",
                  "not supported by this backend yet");
  }
  // What the occupant changed relative to its layers, at or below `under`.
  virtual Result<isolation::ChangeReport> ReadChanges(const std::string& /*under*/,
                                                      size_t /*limit*/) {
    return Status(Code::kUnavailable, "read changes", "sandbox",
                  "not supported by this backend yet");
  }
  // Writes what a snapshot of the sandbox holds (issue 30) into the directory `dst_dirfd`:
  // its top layer first when `with_top_layer` (the sandbox's workspace: one layer then stands
  // for both), then its writable layer, with ids as the sandbox sees them. The sandbox is
  // frozen meanwhile (a paused one stays paused), so the tree is one moment's.
  virtual Status WriteSnapshotTree(int /*dst_dirfd*/, bool /*with_top_layer*/,
                                   const isolation::LayerTreeOptions& /*opts*/,
                                   isolation::LayerTreeStats* /*stats*/) {
    return Status(Code::kUnavailable, "snapshot", "sandbox", "not supported by this backend yet");
  }
  // The name of its cgroup (a warm sandbox keeps the pool name it was made under: cgroup2
  // cannot rename); empty if the backend does not say.
  virtual std::string cgroup_name() const { return ""; }
  // Its cgroups' directories, for density (node/density) to read and reclaim its memory;
  // empty if the backend has none.
  virtual isolation::CgroupPaths cgroup_paths() const { return {}; }
  // The CPUs the instance uses by itself while nothing runs in it (a VM's QEMU and idle
  // guest kernel), which density does not count as the sandbox being busy.
  virtual double quiet_cpus() const { return 0; }
  // A screen the machine itself has (backend vm with a display: QEMU's devices), rather than
  // one its agent keeps (a container's or microVM's Xvfb): the node asks the instance, not
  // the agent, for screenshots and input.
  virtual bool has_machine_screen() const { return false; }
  virtual Result<std::string> MachineScreenshot() {
    return Status(Code::kUnavailable, "take a screenshot", "sandbox", "no machine screen");
  }
  virtual Status MachineInput(const std::vector<agent::InputStep>& /*steps*/) {
    return Status(Code::kUnavailable, "send input", "sandbox", "no machine screen");
  }
  // The host pid of the sandbox's init (the agent), for diagnostics.
  virtual int host_pid() const = 0;
  // The network namespace its init is in, opened before it is destroyed (so that the node
  // can lend it again: net/bare_netns_pool.h). Unavailable where the backend has none of
  // the node's to give back.
  virtual Result<UniqueFd> OpenNetns() {
    return Status(Code::kUnavailable, "open network namespace", "sandbox", "not a container");
  }
  virtual uint32_t host_uid() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Makes the sandbox and waits for its agent to say ready. A failure leaves nothing behind.
  virtual Result<std::unique_ptr<Instance>> Create(const SandboxConfig& config) = 0;
  // Takes over a sandbox a previous run of this daemon made (after a crash or kill -9): its
  // processes, cgroups and uid range, and a new control connection to its agent.
  virtual Result<std::unique_ptr<Instance>> Adopt(const std::string& id) {
    return Status(Code::kUnavailable, "adopt", id, "not supported by backend " + name());
  }
};

}  // namespace warren::runtime
