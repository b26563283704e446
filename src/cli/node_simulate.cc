#include "cli/node_simulate.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

#include "base/ids.h"
#include "cli/common.h"
#include "cli/node_flags.h"
#include "cluster/cluster_secret.h"
#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "cluster/node_reconcile.h"
#include "cluster/node_service.h"
#include "cluster/simulated_node.h"
#include "server/http_server.h"

namespace warren::cli {
namespace {

// One simulated machine: what a real `warren node` has, minus the kernel work.
struct SimulatedMachine {
  std::string name;
  std::unique_ptr<cluster::SimulatedNode> node;
  std::unique_ptr<cluster::NodeService> service;
  std::unique_ptr<server::HttpServer> http;
  std::unique_ptr<cluster::NodeHeartbeat> heartbeat;
};

std::string NodeName(const SimulatedNodesOptions& o, int i) {
  if (o.count == 1) return o.name;
  char suffix[16];
  snprintf(suffix, sizeof suffix, "-%03d", i);
  return o.name + suffix;
}

}  // namespace

int RunSimulatedNodes(const SimulatedNodesOptions& o) {
  const size_t colon = o.listen.rfind(':');
  if (colon == std::string::npos) return Fail(Invalid("--listen wants ADDR:PORT", o.listen));
  const std::string host = o.listen.substr(0, colon);
  int base_port = 0;
  try {
    base_port = std::stoi(o.listen.substr(colon + 1));
  } catch (...) {
    return Fail(Invalid("--listen wants ADDR:PORT", o.listen));
  }
  if (base_port < 0 || base_port + o.count > 65536)
    return Fail(Invalid("--listen: the nodes' ports do not fit below 65536", o.listen));
  sigset_t sigs;
  PrepareDaemonProcess(&sigs);

  auto endpoints = cluster::ParseEtcdEndpoints(o.etcd);
  if (!endpoints.ok()) return Fail(endpoints.status());
  cluster::EtcdClient etcd(*endpoints);
  auto secret = cluster::LoadOrCreateClusterSecret(&etcd);
  if (!secret.ok()) return Fail(secret.status().Context("join the cluster"));

  const std::set<runtime::BackendKind> backends = {
      runtime::BackendKind::kContainer, runtime::BackendKind::kMicrovm, runtime::BackendKind::kVm};
  std::vector<std::unique_ptr<SimulatedMachine>> machines;
  for (int i = 0; i < o.count; ++i) {
    auto m = std::make_unique<SimulatedMachine>();
    m->name = NodeName(o, i);
    m->node = std::make_unique<cluster::SimulatedNode>(m->name, backends);
    m->service = std::make_unique<cluster::NodeService>(m->node.get(), *secret);
    server::ServerOptions sopts;
    sopts.listen = host + ":" + std::to_string(base_port == 0 ? 0 : base_port + i);
    // Few threads each: a process holds many nodes, and nothing a node does here blocks long.
    sopts.io_threads = 1;
    sopts.blocking_threads = 4;
    m->http = std::make_unique<server::HttpServer>(m->service.get(), sopts);
    if (Status st = m->http->Start(); !st.ok()) return Fail(st.Context("node " + m->name));
    cluster::NodeRecord base;
    base.name = m->name;
    base.address = "http://" + host + ":" + std::to_string(m->http->port());
    base.capacity = o.capacity;
    base.labels = o.labels;
    base.labels["simulated"] = "true";
    base.started_at = NowRfc3339();
    base.backends = backends;
    cluster::SimulatedNode* node = m->node.get();
    m->heartbeat = std::make_unique<cluster::NodeHeartbeat>(&etcd, o.ttl_s, [base, node] {
      cluster::NodeRecord r = base;
      r.sandboxes = static_cast<int64_t>(node->size());
      r.layers = node->Layers();
      return r;
    });
    // Back after its lease expired: sandboxes deleted meanwhile go, lost ones come back.
    const std::string name = m->name;
    m->heartbeat->SetOnRejoin([&etcd, node, name] {
      (void)cluster::ReconcileNode(&etcd, node, name, node->SandboxIds());
    });
    if (Status st = m->heartbeat->Start(); !st.ok())
      return Fail(st.Context("node " + m->name + " joins the cluster"));
    machines.push_back(std::move(m));
  }
  spdlog::info("warren node --simulate: {} simulated node(s) {}..{} of {} CPUs, {} MB each",
               o.count, machines.front()->name, machines.back()->name, o.capacity.cpu_milli / 1000,
               o.capacity.memory_mb);

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("warren node --simulate: signal {}, leaving the cluster", sig);
  for (auto& m : machines) m->heartbeat->Stop(/*leave=*/true);
  for (auto& m : machines) m->http->Stop();
  return 0;
}

}  // namespace warren::cli
