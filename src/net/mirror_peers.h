// The package mirror of a cluster: every node's egress proxy keeps its own cache, and a key
// (net::CacheKey) belongs to one node, chosen by rendezvous hashing over the nodes that are up.
// A node that misses a key it does not own asks the owner's peer listener for it instead of the
// registry (the owner serves it from its cache or fetches it, once for the whole cluster, with
// its own collapsed flight); only if the owner cannot be reached does the node go upstream
// itself. So the second node to need a package takes it from the first's fetch, and a burst
// across the cluster costs one upstream request per object. A node leaving moves only its own
// keys (to their next-highest node): the rest of the cluster's cache stays where it is.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace warren::net {

struct MirrorPeer {
  std::string name;
  std::string address;  // HOST:PORT of its peer listener
};

// Who owns which key, and what a peer request carries. Implemented over the cluster's node
// directory (cluster/mirror_directory.h); fakes in tests.
class MirrorPeers {
 public:
  virtual ~MirrorPeers() = default;
  // The node owning `key` if that is another node; nullopt when it is this one (or alone).
  virtual std::optional<MirrorPeer> OwnerOf(const std::string& key) const = 0;
  // Sent as `Proxy-Authorization: Bearer ...` to peers, and required from them.
  virtual const std::string& credential() const = 0;
};

// The index in `names` of the node that owns `key`: the highest hash of (name, key). Stable as
// nodes come and go: only the keys of a node that left move.
size_t RendezvousOwner(const std::string& key, const std::vector<std::string>& names);

}  // namespace warren::net
