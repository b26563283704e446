// warren apiserver --etcd URLS --listen ADDR:PORT --data-dir DIR --layer-store DIR: one API
// server of a cluster. It serves the whole public API (the same Api and routes as `warren
// serve`) over the cluster's state in etcd (cluster/kv_state_store.h), places sandboxes on
// the cluster's nodes (cluster/cluster_fleet.h) and reaches them with the cluster credential
// (cluster/remote_node.h). Its data dir keeps only the cluster's admin token.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "base/ids.h"
#include "base/unique_fd.h"
#include "cli/common.h"
#include "cli/node_flags.h"
#include "cluster/cluster_calls.h"
#include "cluster/cluster_fleet.h"
#include "cluster/cluster_secret.h"
#include "cluster/etcd_client.h"
#include "cluster/expiry_sweeper.h"
#include "cluster/idle_refresher.h"
#include "cluster/kv_state_store.h"
#include "cluster/membership.h"
#include "cluster/presence.h"
#include "cluster/remote_node.h"
#include "cluster/txn_combiner.h"
#include "image/layer_store.h"
#include "server/api_service.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/service_chain.h"
#include "server/ui_service.h"

namespace warren::cli {
namespace {

// Runs `fn` every `period` on a thread of its own until destroyed.
class Periodic {
 public:
  Periodic(std::chrono::milliseconds period, std::function<void()> fn)
      : thread_([this, period, fn = std::move(fn)] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
            lock.unlock();
            fn();
            lock.lock();
          }
        }) {}
  ~Periodic() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

struct ApiServerFlags {
  std::string etcd = "http://127.0.0.1:2379";
  std::string listen = "127.0.0.1:7070";
  std::string data_dir = "/var/lib/warren-apiserver";
  std::string layer_store;
  std::string layer_format = "whole";
  double cpu_overcommit = 1.0, memory_overcommit = 1.0;
  std::string placement = "spread";
};

// DATA_DIR/admin.token holds the cluster's admin token (0600), replaced atomically.
Status WriteAdminToken(const std::string& data_dir, const std::string& token) {
  const std::string path = data_dir + "/admin.token";
  const std::string tmp = path + "." + RandomHex(4);
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus("create", tmp);
  const std::string line = token + "\n";
  if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    unlink(tmp.c_str());
    return ErrnoStatus("write", tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return ErrnoStatus("rename", path);
  }
  return Status::Ok();
}

int RunApiServer(const ApiServerFlags& f) {
  sigset_t sigs;
  PrepareDaemonProcess(&sigs);
  if (f.placement != "spread" && f.placement != "pack")
    return Fail(Invalid("--placement wants spread or pack", f.placement));
  if (f.cpu_overcommit < 1 || f.memory_overcommit < 1)
    return Fail(Invalid("overcommit ratios are 1 or more"));
  // An API server publishes built and uploaded layers: it needs the store as a directory (an
  // HTTP store is filled by whoever serves it).
  if (f.layer_store.empty() || f.layer_store[0] != '/')
    return Fail(
        Invalid("--layer-store wants the shared layer directory (absolute path)", f.layer_store));
  if (mkdir(f.data_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(ErrnoStatus("mkdir", f.data_dir));

  auto endpoints = cluster::ParseEtcdEndpoints(f.etcd);
  if (!endpoints.ok()) return Fail(endpoints.status());
  cluster::EtcdClient etcd(*endpoints);
  auto secret = cluster::LoadOrCreateClusterSecret(&etcd);
  if (!secret.ok()) return Fail(secret.status().Context("join the cluster"));
  auto admin = cluster::LoadOrCreateClusterAdminToken(&etcd);
  if (!admin.ok()) return Fail(admin.status().Context("join the cluster"));
  if (Status st = WriteAdminToken(f.data_dir, *admin); !st.ok()) return Fail(st);

  // Layers are written straight into the shared directory (content-addressed, renamed into
  // place): every node reads them from there.
  image::LayerStore layers(f.layer_store);
  if (Status st = layers.Init(); !st.ok()) return Fail(st.Context("open the layer store"));
  if (f.layer_format == "chunked")
    layers.SetFormat(image::LayerFormat::kChunked);
  else if (f.layer_format != "whole")
    return Fail(Invalid("--layer-format is whole or chunked", f.layer_format));
  // This run's name among the API servers: a restarted replica is a new one, so the creates
  // its earlier run left are orphans like any dead replica's.
  char host[256] = "apiserver";
  (void)gethostname(host, sizeof host - 1);
  cluster::Presence presence(&etcd, std::string(host) + "-" + RandomHex(4));
  if (Status st = presence.Start(); !st.ok()) return Fail(st.Context("join the cluster"));
  // The records' writes of concurrent requests share transactions (cluster/txn_combiner.h).
  cluster::TxnCombiner combined(&etcd);
  cluster::KvStateStore state(&combined, presence.name());
  server::TokenRegistry tokens(&state, *admin);
  if (Status st = tokens.Load(); !st.ok()) return Fail(st.Context("load tokens"));
  // Tokens are made and removed through any replica: an unknown one is looked up again at
  // once, and every replica rereads them every 2 s so that a removal reaches it.
  tokens.SetReloadOnMiss(true);
  Periodic token_refresh(std::chrono::seconds(2), [&tokens] {
    if (Status st = tokens.Load(); !st.ok()) spdlog::warn("reload tokens: {}", st.ToString());
  });

  cluster::PlacementPolicy policy;
  policy.cpu_overcommit = f.cpu_overcommit;
  policy.memory_overcommit = f.memory_overcommit;
  policy.strategy = f.placement == "pack" ? cluster::PlacementPolicy::Strategy::kPack
                                          : cluster::PlacementPolicy::Strategy::kSpread;
  cluster::NodeDirectory directory(&etcd);
  const std::string credential = *secret;
  cluster::ClusterFleet fleet(
      &etcd, &directory,
      [credential](const cluster::NodeRecord& node) -> std::unique_ptr<node::NodeApi> {
        return std::make_unique<cluster::RemoteNode>(node.name, node.address, credential);
      },
      policy, presence.name());
  if (Status st = directory.Start(); !st.ok()) return Fail(st.Context("watch the nodes"));

  server::Api api(&state, &state, &fleet, &layers, &tokens);
  // POST /v1/calls: each call, or each share of a batch, on a node that runs fncall.
  cluster::ClusterCalls calls([&directory] { return directory.Ready(); },
                              [&fleet](const std::string& node) { return fleet.Node(node); });
  api.SetCalls(&calls);
  api.StartReaper();
  api.StartHistory();
  // Creates a dead replica left half-made: every replica looks, the first to remove one wins.
  Periodic orphan_sweep(std::chrono::seconds(2), [&api] { api.CleanOrphanedCreates(); });
  // Every sandbox's TTL, whichever replica made it: one replica at a time sweeps the TTL index.
  cluster::ExpirySweeper expiry(
      &etcd, presence.name(), [&presence] { return presence.lease(); },
      [&api](const std::string& id) { return api.ExpireSandbox(id); });
  // Idle timeouts: every replica writes the uses it serves; the sweeping one ends what is idle.
  cluster::IdleRefresher uses(&etcd, [] { return static_cast<int64_t>(UnixNow() * 1000); });
  uses.Start();
  api.SetUseRecorder(
      [&uses](const std::string& id, double timeout_s) { uses.Touch(id, timeout_s); });
  expiry.SetIdle([&api](const std::string& id) { return api.EndIfIdle(id); });
  Periodic ttl_sweep(std::chrono::seconds(1),
                     [&expiry] { (void)expiry.Sweep(static_cast<int64_t>(UnixNow() * 1000)); });
  server::ApiService service(&api, &tokens);
  server::ServerOptions sopts;
  sopts.listen = f.listen;
  // The dashboard at /ui, as on `warren serve`.
  server::UiService ui;
  server::ServiceChain with_ui(&service, &ui);
  server::HttpServer http(&with_ui, sopts);
  if (Status st = http.Start(); !st.ok()) return Fail(st);
  spdlog::info("warren apiserver: listening on {} (port {}), etcd {}, layers in {}", f.listen,
               http.port(), f.etcd, f.layer_store);

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("warren apiserver: signal {}, stopping", sig);
  // The sandboxes stay: they belong to the cluster, not to this replica.
  http.Stop();
  uses.Stop();  // after a last write of what the last requests used
  api.StopCalls();
  orphan_sweep.Stop();
  ttl_sweep.Stop();
  api.StopReaper();
  // The directory's watch outlives the Api below: nothing may call into it any more.
  fleet.SetOnNodeLost(nullptr);
  fleet.SetOnSandboxLost(nullptr);
  return 0;
}

}  // namespace

void AddApiServer(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "apiserver", "run an API server of a cluster (stateless: etcd holds the state)");
  auto f = std::make_shared<ApiServerFlags>();
  cmd->add_option("--etcd", f->etcd, "etcd endpoints, comma-separated (http://HOST:PORT)");
  cmd->add_option("--listen", f->listen, "ADDR:PORT to serve the API on");
  cmd->add_option("--data-dir", f->data_dir, "where the cluster's admin token is written");
  cmd->add_option("--layer-format", f->layer_format,
                  "how built layers are stored: whole (one EROFS image each node copies before "
                  "use) or chunked (metadata plus 64 KiB chunks nodes read on demand)");
  cmd->add_option("--layer-store", f->layer_store,
                  "the shared layer directory every node reads (see `warren node`)")
      ->required();
  cmd->add_option("--cpu-overcommit", f->cpu_overcommit,
                  "CPU placed per core a node has (default 1: none)");
  cmd->add_option("--memory-overcommit", f->memory_overcommit,
                  "memory placed per byte a node has (default 1: none)");
  cmd->add_option("--placement", f->placement,
                  "spread (least loaded node first) or pack (fullest node that fits)");
  cmd->callback([f] { ExitCode() = RunApiServer(*f); });
}

}  // namespace warren::cli
