// Layers (named images) and their blobs: upload, list, delete, and the garbage collection of
// blobs no name and no sandbox refers to. One concern of the API (server::Api forwards to it).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "image/layer_store.h"
#include "server/state_store.h"

namespace warren::server {

class LayerService {
 public:
  LayerService(StateStore* state, image::LayerStore* store) : state_(state), store_(store) {}
  static constexpr double kChunkGraceS = 600;
  // NAME:TAG's record, with `format` (whole or chunked) and, for a chunked layer, `chunks`
  // and `meta_bytes`.
  Result<nlohmann::json> Get(const std::string& ref);

  // POST /v1/layers?name=&tag=&kind=&source=: the body (a tar or an EROFS image) is at
  // `body_path`.
  Result<nlohmann::json> Upload(const std::map<std::string, std::string>& query,
                                const std::string& body_path);
  // Names a blob a node made and published (a sandbox's snapshot) NAME:TAG, a workspace
  // layer; `source` says where it came from. kInternal when the blob is not in this store
  // (the node's did not reach it). The caller may hold PinBlobs: the digest the tag named
  // before, if another, is left in `*moved_from` for it to Collect once it lets go.
  Result<nlohmann::json> NameSnapshot(const std::string& ref, const std::string& digest,
                                      uint64_t size, const std::string& source,
                                      std::string* moved_from);
  // The bytes a layer's files take at most (its image's size; a chunked one's metadata and
  // chunks); 0 when the store does not hold it.
  uint64_t Bytes(const std::string& digest) const;
  Result<nlohmann::json> List();
  // The name goes; the blob stays while a sandbox made from it exists.
  Status Delete(const std::string& ref);

  // A create holds this from resolving NAME:TAG to digests until its layers are mounted, so a
  // blob is never removed in between (collection takes the lock exclusively).
  std::shared_lock<std::shared_mutex> PinBlobs() { return std::shared_lock(gc_mu_); }
  // Removes those of `digests` that no layer name and no sandbox refers to any more (a sandbox
  // deleted, a tag moved).
  void Collect(const std::vector<std::string>& digests);
  // Removes every stored blob no layer name and no sandbox refers to, and build leftovers (at
  // startup: a crash may have left either).
  void Sweep();
  // Where an upload's body is spooled.
  std::string TempPath(const std::string& what) const { return store_->TempPath(what); }

 private:
  std::set<std::string> DigestsInUse();

  StateStore* state_;
  image::LayerStore* store_;
  std::shared_mutex gc_mu_;  // guards no field: blobs on disk against a create in flight
};

}  // namespace warren::server
