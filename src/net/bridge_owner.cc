#include "net/bridge_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>

namespace warren::net {
namespace {

constexpr const char* kAliasPrefix = "warren-net ";

bool ValidTable(const std::string& t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

size_t CountPorts(const std::string& link) {
  DIR* d = opendir(("/sys/class/net/" + link + "/brif").c_str());
  if (!d) return 0;
  size_t n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

}  // namespace

Result<BridgeOwnerLock> BridgeOwnerLock::Acquire(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus("open the network's owner file", path);
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status(Code::kConflict, "own the sandbox network", path,
                    "another warren daemon runs on this data dir");
    return ErrnoStatus("lock the network's owner file", path);
  }
  return BridgeOwnerLock(std::move(fd), path);
}

BridgeOwnerLock::~BridgeOwnerLock() {
  // Unlinked while still held: a node looking at our bridge now either finds no file (its
  // owner is going) or a held one.
  if (fd_) unlink(path_.c_str());
}

std::string BridgeOwnerAlias(const std::string& lock_path, const std::string& table) {
  return kAliasPrefix + std::string("table=") + table + " owner=" + lock_path;
}

BridgeInspection InspectBridge(const std::string& name) {
  BridgeInspection r;
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') return r;
  std::ifstream in("/sys/class/net/" + name + "/ifalias");
  std::string alias;
  std::getline(in, alias);
  if (alias.rfind(kAliasPrefix, 0) != 0) return r;
  const size_t t = alias.find("table="), o = alias.find(" owner=");
  if (t == std::string::npos || o == std::string::npos || o < t) return r;
  r.table = alias.substr(t + 6, o - t - 6);
  r.lock_path = alias.substr(o + 7);
  if (!ValidTable(r.table) || r.lock_path.empty() || r.lock_path[0] != '/') return {};
  r.ports = CountPorts(name);
  // Nobody holds a missing file: its owner stopped (a clean stop removes bridge and file
  // together, so this is one that died between the two, or whose file went with a reboot
  // of /run while the link did not).
  UniqueFd fd(open(r.lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    r.owner = errno == ENOENT ? BridgeInspection::Owner::kDead : BridgeInspection::Owner::kLive;
    return r;
  }
  if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
    r.owner = BridgeInspection::Owner::kDead;
    flock(fd.get(), LOCK_UN);
  } else {
    r.owner = BridgeInspection::Owner::kLive;
  }
  return r;
}

bool AnotherLiveBridge(const std::string& mine) {
  DIR* d = opendir("/sys/class/net");
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name[0] == '.' || name == mine) continue;
    if (InspectBridge(name).owner == BridgeInspection::Owner::kLive) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

}  // namespace warren::net
