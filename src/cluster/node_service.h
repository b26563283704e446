// NodeService: a cluster node's API, for API servers only (server/http_service.h over the
// node's NodeApi). Every route but /healthz needs the cluster credential (a secret every API
// server and node of the cluster reads from etcd, cluster/cluster_secret.h), never a tenant's
// token: a tenant reaches a node only through an API server, which checks its token, scopes
// and quotas. Requests and answers are the node's wire types (node/node_wire.h); a failure
// travels whole (code, operation, errno) so that the API server, not the node, decides what a
// tenant is told (node::NodeFault). cluster/remote_node.h is the other end.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "node/node_api.h"
#include "server/http_service.h"

namespace warren::cluster {

class NodeService : public server::HttpService {
 public:
  // `node` outlives the service. Sandboxes whose agent died are kept for RemoteNode to
  // collect (GET /node/v1/lost).
  NodeService(node::NodeApi* node, std::string credential);

  const server::RouteTable& routes() const override;
  std::optional<server::Principal> Authenticate(std::string_view authorization) const override;
  server::HttpReply Handle(int route, server::HttpRequest& req) override;

 private:
  using Handler = server::HttpReply (NodeService::*)(server::HttpRequest&);
  struct RouteEntry {
    server::RouteSpec spec;
    Handler handler;
  };
  static const std::vector<RouteEntry>& Entries();

  server::HttpReply Health(server::HttpRequest&);
  server::HttpReply Info(server::HttpRequest&);
  server::HttpReply Lost(server::HttpRequest&);
  server::HttpReply Reap(server::HttpRequest&);
  server::HttpReply Create(server::HttpRequest&);
  server::HttpReply Call(server::HttpRequest&);
  server::HttpReply CallBatch(server::HttpRequest&);
  server::HttpReply Delete(server::HttpRequest&);
  server::HttpReply Adopt(server::HttpRequest&);
  server::HttpReply Running(server::HttpRequest&);
  server::HttpReply SetNetwork(server::HttpRequest&);
  server::HttpReply SetFilesystem(server::HttpRequest&);
  server::HttpReply Changes(server::HttpRequest&);
  server::HttpReply Snapshot(server::HttpRequest&);
  server::HttpReply PrepareFork(server::HttpRequest&);
  server::HttpReply EndFork(server::HttpRequest&);
  server::HttpReply Density(server::HttpRequest&);
  server::HttpReply Pause(server::HttpRequest&);
  server::HttpReply Resume(server::HttpRequest&);
  server::HttpReply StartExec(server::HttpRequest&);
  server::HttpReply ExecHistory(server::HttpRequest&);
  server::HttpReply GetExec(server::HttpRequest&);
  server::HttpReply StreamExec(server::HttpRequest&);
  server::HttpReply SignalExec(server::HttpRequest&);
  server::HttpReply ExecStdin(server::HttpRequest&);
  server::HttpReply ResizeExec(server::HttpRequest&);
  server::HttpReply Screen(server::HttpRequest&);
  server::HttpReply DesktopInput(server::HttpRequest&);
  server::HttpReply PutFile(server::HttpRequest&);
  server::HttpReply GetFile(server::HttpRequest&);

  node::NodeApi* const node_;
  const std::string credential_;
  Mutex mu_;
  // Sandboxes whose agent died by itself, numbered from 1: RemoteNode asks for those after
  // the last it saw. The oldest go past kMaxLost (a client that far behind lists again).
  struct LostEntry {
    uint64_t seq;
    std::string id, reason;
  };
  std::vector<LostEntry> lost_ GUARDED_BY(mu_);
  uint64_t lost_seq_ GUARDED_BY(mu_) = 0;
};

}  // namespace warren::cluster
