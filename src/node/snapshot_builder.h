// Turning a sandbox's tree into a stored layer (issue 30): a scratch directory in the node's
// layer store (the same filesystem as its blobs), filled by the backend
// (runtime::Instance::WriteSnapshotTree), made an EROFS image (LayerStore::ImportTree, whole:
// microVMs mount only whole layers), committed under its digest and published to the shared
// store. Whatever fails, the scratch tree goes and nothing is half made: a blob exists only
// once complete, and one no name or sandbox refers to is the layer service's to collect.
#pragma once

#include <functional>

#include "base/status.h"
#include "image/layer_store.h"
#include "isolation/layer_tree.h"
#include "node/node_api.h"

namespace warren::node {

// Fills the directory `dst_dirfd` (adding to `stats`) under `opts`; `work_dir` is an empty
// directory of its own on the same filesystem, not part of the layer.
using WriteTreeFn = std::function<Status(int dst_dirfd, const std::string& work_dir,
                                         const isolation::LayerTreeOptions& opts,
                                         isolation::LayerTreeStats* stats)>;

// `skip`: paths the node wrote itself (egress files), left out. The tree may hold at most
// `spec.max_bytes` of file data, and at most what the store's filesystem has room for twice
// over (the copy and its image): beyond either, kQuota naming the bound.
// The tree is built in RAM (a private tmpfs) up to `ram_max` bytes, and at most a quarter of
// what the host has available; a larger one again on the store's disk.
inline constexpr uint64_t kSnapshotRamMax = 1ull << 30;
Result<SnapshotLayer> BuildSnapshotLayer(image::LayerStore* store, const std::string& id,
                                         const SnapshotSpec& spec,
                                         const std::set<std::string>& skip,
                                         const WriteTreeFn& write_tree,
                                         uint64_t ram_max = kSnapshotRamMax);

}  // namespace warren::node
