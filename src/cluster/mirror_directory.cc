#include "cluster/mirror_directory.h"

namespace warren::cluster {

std::optional<net::MirrorPeer> MirrorDirectory::OwnerOf(const std::string& key) const {
  MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  if (names_.empty() || now - taken_ > std::chrono::seconds(1)) {
    names_.clear();
    addresses_.clear();
    for (const NodeView& v : directory_->Ready()) {  // by name: the same order on every node
      if (v.record.mirror.empty()) continue;
      names_.push_back(v.record.name);
      addresses_.push_back(v.record.mirror);
    }
    taken_ = now;
  }
  if (names_.empty()) return std::nullopt;
  const size_t owner = net::RendezvousOwner(key, names_);
  if (names_[owner] == self_) return std::nullopt;
  return net::MirrorPeer{names_[owner], addresses_[owner]};
}

}  // namespace warren::cluster
