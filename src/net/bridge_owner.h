// Who owns a sandbox bridge. A node holds an flock on an owner file for as long as its network
// runs, and writes that file's path and its nftables table into the bridge's alias
// (IFLA_IFALIAS; `ip link` shows it). A bridge whose owner file nobody holds was left by a
// daemon that died: if no sandbox hangs on it either, another node may take its subnet, which
// it would otherwise refuse forever (a killed daemon whose data dir was then removed).
#pragma once

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::net {

class BridgeOwnerLock {
 public:
  // Takes `path` (made if missing). kConflict if a live process holds it: another daemon
  // runs on this data dir.
  static Result<BridgeOwnerLock> Acquire(const std::string& path);
  BridgeOwnerLock(BridgeOwnerLock&&) noexcept = default;
  BridgeOwnerLock& operator=(BridgeOwnerLock&&) = delete;
  ~BridgeOwnerLock();  // removes the file, then lets the lock go

  const std::string& path() const { return path_; }

 private:
  BridgeOwnerLock(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// The link group of every node's sandbox bridge.
inline constexpr uint32_t kSandboxBridgeGroup = 0x7772;  // "wr"

// The alias a node gives its bridge.
std::string BridgeOwnerAlias(const std::string& lock_path, const std::string& table);

struct BridgeInspection {
  enum class Owner {
    kNotWarren,  // no alias of ours: another network, a VPN, a node of an older version
    kLive,       // its owner file is held
    kDead,       // nobody holds it
  };
  Owner owner = Owner::kNotWarren;
  std::string table, lock_path;
  size_t ports = 0;  // links enslaved to it (sandboxes' veths)
};

// What the link `name` in this network namespace is, read from sysfs.
BridgeInspection InspectBridge(const std::string& name);
// Whether a bridge other than `mine` belongs to a live node.
bool AnotherLiveBridge(const std::string& mine);

}  // namespace warren::net
