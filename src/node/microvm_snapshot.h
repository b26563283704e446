// A microVM's snapshot tree (issue 30; node/snapshot_builder.h builds the layer from it). Its
// workspace layer is read from this node's copy of the blob the guest mounts; its writable
// layer lives in the guest, so its agent streams it as a pax tar (agent fs_snapshot,
// agent/tar_stream.h), which is unpacked beside the tree and applied as a container's upper
// is (isolation/layer_tree.h). The guest's root could have replaced its agent: the stream is
// bounded by what the snapshot may hold, and unpacked as an untrusted layer upload is.
#pragma once

#include <string>

#include "base/status.h"
#include "image/erofs_mount_cache.h"
#include "image/layer_store.h"
#include "isolation/layer_tree.h"
#include "node/agent_conn.h"

namespace warren::node {

// Fills `dst` with sandbox `id`'s tree: its workspace layer (`workspace`, a digest, or "")
// then its writable layer from `conn`'s agent; `work` is scratch beside `dst`.
Status MicrovmSnapshotTree(image::LayerStore* store, image::ErofsMountCache* mounts,
                           AgentConn& conn, const std::string& id, const std::string& workspace,
                           int dst, const std::string& work,
                           const isolation::LayerTreeOptions& opts,
                           isolation::LayerTreeStats* stats);

}  // namespace warren::node
