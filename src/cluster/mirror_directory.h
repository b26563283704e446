// The package mirror's peers as the cluster's node directory sees them (net/mirror_peers.h):
// every node that is up and publishes a mirror address in its record owns the keys
// rendezvous hashing gives it. The list is taken from the directory at most once a second
// (a miss asks who owns its key; the directory's records are larger than the list).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/membership.h"
#include "net/mirror_peers.h"

namespace warren::cluster {

class MirrorDirectory : public net::MirrorPeers {
 public:
  // `directory` is started and outlives this; `self` is this node's name.
  MirrorDirectory(const NodeDirectory* directory, std::string self, std::string credential)
      : directory_(directory), self_(std::move(self)), credential_(std::move(credential)) {}

  std::optional<net::MirrorPeer> OwnerOf(const std::string& key) const override;
  const std::string& credential() const override { return credential_; }

 private:
  const NodeDirectory* const directory_;
  const std::string self_, credential_;
  mutable Mutex mu_;
  mutable std::vector<std::string> names_ GUARDED_BY(mu_);
  mutable std::vector<std::string> addresses_ GUARDED_BY(mu_);
  mutable std::chrono::steady_clock::time_point taken_ GUARDED_BY(mu_);
};

}  // namespace warren::cluster
