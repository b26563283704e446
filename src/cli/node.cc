// warren node --etcd URLS --listen ADDR:PORT --data-dir DIR --name NAME: one machine of a
// cluster. It runs sandboxes (the same LocalNode as `warren serve`), serves the node API to
// API servers only (cluster/node_service.h, behind the cluster credential), and holds its
// membership in etcd (cluster/membership.h): a lease, and a record of its address, capacity,
// use, backends, labels and cached layers that placement reads.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <thread>

#include "base/ids.h"
#include "cli/common.h"
#include "cli/fncall_flags.h"
#include "cli/node_flags.h"
#include "cli/node_simulate.h"
#include "cluster/cluster_secret.h"
#include "cluster/etcd_client.h"
#include "cluster/keys.h"
#include "cluster/kv_state_store.h"
#include "cluster/membership.h"
#include "cluster/mirror_directory.h"
#include "cluster/node_reconcile.h"
#include "cluster/node_service.h"
#include "image/blob_source.h"
#include "image/layer_store.h"
#include "isolation/cgroup.h"
#include "node/local_node.h"
#include "node/node_selector.h"
#include "server/http_server.h"
#include "server/sandbox_record.h"

namespace warren::cli {
namespace {

struct ClusterNodeFlags {
  std::string etcd = "http://127.0.0.1:2379";
  std::string listen = "127.0.0.1:7071";
  std::string advertise;  // ADDR:PORT API servers reach the node at (default: --listen)
  // ADDR[:PORT] other nodes' proxies reach this node's package mirror at (default: the
  // advertised address, any free port).
  std::string mirror_listen;
  std::string data_dir = "/var/lib/warren-node";
  std::string name;
  std::string layer_store;
  std::string layer_cache_size;  // default: half the data dir's filesystem
  std::vector<std::string> labels;
  int ttl_s = 5;
  NodeFlags node;
  FncallFlags fncall;
  // --simulate N: N simulated nodes of this capacity each (cli/node_simulate.h).
  int simulate = 0;
  std::string sim_cpus = "192", sim_memory = "1536G", sim_disk = "4T";
};

// What the machine has for sandboxes: its CPUs, memory and the data dir's disk.
cluster::Resources Capacity(const std::string& data_dir) {
  cluster::Resources r;
  r.cpu_milli = static_cast<int64_t>(std::thread::hardware_concurrency()) * 1000;
  struct sysinfo si;
  if (sysinfo(&si) == 0)
    r.memory_mb = static_cast<int64_t>(static_cast<uint64_t>(si.totalram) * si.mem_unit >> 20);
  struct statvfs fs;
  if (statvfs(data_dir.c_str(), &fs) == 0)
    r.disk_mb = static_cast<int64_t>(static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize >> 20);
  return r;
}

// Sandboxes etcd says run here, taken over after a restart (kill -9, crash): their processes
// kept running. Whatever else an earlier run left is reaped.
void AdoptFromEtcd(cluster::KvStore* kv, node::LocalNode* node, const std::string& name) {
  auto listed = kv->List(cluster::keys::kSandboxes);
  if (!listed.ok()) {
    spdlog::warn("node {}: cannot list sandboxes to adopt: {}", name, listed.status().ToString());
    return;
  }
  int adopted = 0;
  for (const auto& item : listed->kvs) {
    auto j = nlohmann::json::parse(item.value, nullptr, false);
    if (j.is_discarded()) continue;
    auto rec = server::ParseSandboxRecord(j);
    if (!rec.ok() || rec->node != name) continue;
    using S = server::SandboxState;
    if (rec->state != S::kRunning && rec->state != S::kPaused && rec->state != S::kLost) continue;
    if (Status st = node->AdoptSandbox(rec->id); st.ok())
      ++adopted;
    else
      spdlog::warn("node {}: cannot adopt {}: {}", name, rec->id, st.ToString());
  }
  int reaped = node->ReapUnadopted();
  spdlog::info("node {}: adopted {} sandbox(es), reaped {} left by an earlier run", name, adopted,
               reaped);
}

// --simulate: the labels parsed as for a real node, the capacity from the --simulate-* flags.
int RunSimulated(const ClusterNodeFlags& f, std::map<std::string, std::string> labels) {
  SimulatedNodesOptions o;
  o.etcd = f.etcd;
  o.listen = f.listen;
  o.name = f.name;
  o.labels = std::move(labels);
  o.ttl_s = f.ttl_s;
  o.count = f.simulate;
  char* end = nullptr;
  const double cpus = strtod(f.sim_cpus.c_str(), &end);
  if (end == f.sim_cpus.c_str() || *end || cpus <= 0 || cpus > 1e6)
    return Fail(Invalid("--simulate-cpus wants a positive number", f.sim_cpus));
  o.capacity.cpu_milli = static_cast<int64_t>(cpus * 1000);
  auto memory = SizeMb(f.sim_memory, "--simulate-memory");
  if (!memory.ok()) return Fail(memory.status());
  auto disk = SizeMb(f.sim_disk, "--simulate-disk");
  if (!disk.ok()) return Fail(disk.status());
  o.capacity.memory_mb = static_cast<int64_t>(*memory);
  o.capacity.disk_mb = static_cast<int64_t>(*disk);
  return RunSimulatedNodes(o);
}

int RunNode(const ClusterNodeFlags& f) {
  if (f.simulate == 0 && geteuid() != 0)
    return Fail("node", "warren node must run as root (it makes namespaces, mounts and cgroups)");
  if (!cluster::ValidNodeName(f.name))
    return Fail(Invalid("--name wants 1-63 of [A-Za-z0-9._-]", f.name));
  std::map<std::string, std::string> labels;
  for (const auto& l : f.labels) {
    const size_t eq = l.find('=');
    if (eq == std::string::npos || !node::ValidLabelPart(l.substr(0, eq)) ||
        !node::ValidLabelPart(l.substr(eq + 1)))
      return Fail(Invalid("--label wants KEY=VALUE, each 1-63 of [A-Za-z0-9._-]", l));
    if (l.rfind(node::kReservedLabelPrefix, 0) == 0)
      return Fail(
          Invalid("--label: keys starting with `warren.` are Warren's own (every node "
                  "carries warren.node=NAME)",
                  l));
    labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  if (f.simulate > 0) return RunSimulated(f, std::move(labels));
  sigset_t sigs;
  PrepareDaemonProcess(&sigs);

  if (mkdir(f.data_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(ErrnoStatus("mkdir", f.data_dir));
  auto endpoints = cluster::ParseEtcdEndpoints(f.etcd);
  if (!endpoints.ok()) return Fail(endpoints.status());
  cluster::EtcdClient etcd(*endpoints);
  cluster::KvStateStore images(&etcd);  // runner images' records, for fncall (below)
  auto secret = cluster::LoadOrCreateClusterSecret(&etcd);
  if (!secret.ok()) return Fail(secret.status().Context("join the cluster"));

  // The cluster's nodes as this node sees them, for the package mirror: who owns which key
  // (cluster/mirror_directory.h). Before the node, whose proxy asks it until it stops.
  cluster::NodeDirectory directory(&etcd);
  if (Status st = directory.Start(); !st.ok()) return Fail(st.Context("list the cluster's nodes"));
  cluster::MirrorDirectory mirror_peers(&directory, f.name, *secret);

  image::LayerStore layers(f.data_dir);
  if (Status st = layers.Init(); !st.ok()) return Fail(st);
  // Layers come from the cluster's shared store; without one, only what this node holds.
  std::unique_ptr<image::BlobSource> shared;
  uint64_t layers_cache_bytes = 0;
  if (!f.layer_store.empty()) {
    auto source = image::OpenBlobSource(f.layer_store);
    if (!source.ok()) return Fail(source.status());
    shared = std::move(*source);
    layers.SetSource(shared.get());
    // What this node holds is a cache of the shared store: bounded.
    uint64_t cache_mb = static_cast<uint64_t>(Capacity(f.data_dir).disk_mb) / 2;
    if (!f.layer_cache_size.empty()) {
      auto mb = SizeMb(f.layer_cache_size, "--layer-cache-size");
      if (!mb.ok()) return Fail(mb.status());
      cache_mb = *mb;
    }
    layers.SetCacheLimit(cache_mb << 20);
    layers_cache_bytes = cache_mb << 20;
    spdlog::info("node {}: layers from {}, cached here up to {} MB", f.name, f.layer_store,
                 cache_mb);
  }
  auto nopts = LocalNodeOptionsOf(f.node, f.data_dir);
  if (!nopts.ok()) return Fail(nopts.status());
  nopts->name = f.name;
  if (shared) {
    // Chunked layers load through this node's blobfsd, its chunk cache bounded like the rest.
    nopts->lazy.store_root = f.data_dir;
    nopts->lazy.source = f.layer_store;
    nopts->lazy.run_dir = f.data_dir + "/blobfs";
    nopts->lazy.cache_bytes = layers_cache_bytes;
  }
  auto node = node::LocalNode::Start(*nopts, &layers);
  if (!node.ok()) return Fail(node.status().Context("start node"));
  // fncall, as in serve: the runner pool (calls the API servers send) and `backend: fncall`
  // sandboxes. Runner images are the cluster's: their records are in etcd, their layers in
  // the shared store. A name's answer is kept a second (calls come by the thousand).
  auto fopts = FncallPoolOptionsOf(f.fncall, !f.node.unsafe_no_hardening);
  if (!fopts.ok()) return Fail(fopts.status());
  if (Status st = (*node)->StartFncall(RunnerImageResolver(&images, 1), *fopts); !st.ok())
    return Fail(st);
  AdoptFromEtcd(&etcd, node->get(), f.name);

  cluster::NodeService service(node->get(), *secret);
  server::ServerOptions sopts;
  sopts.listen = f.listen;
  server::HttpServer http(&service, sopts);
  if (Status st = http.Start(); !st.ok()) return Fail(st);
  std::string advertise = f.advertise.empty() ? f.listen : f.advertise;
  if (advertise.size() > 2 && advertise.substr(advertise.size() - 2) == ":0")
    advertise = advertise.substr(0, advertise.size() - 1) + std::to_string(http.port());

  // The package mirror: other nodes ask this one for the keys it owns (net/mirror_peers.h).
  std::string mirror;
  if (nopts->network) {
    std::string where = f.mirror_listen.empty() ? advertise : f.mirror_listen;
    std::string host = where;
    uint16_t port = 0;
    if (size_t colon = where.rfind(':'); colon != std::string::npos) {
      host = where.substr(0, colon);
      if (!f.mirror_listen.empty()) {
        const std::string digits = where.substr(colon + 1);
        unsigned v = 0;
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        if (ec != std::errc() || end != digits.data() + digits.size() || v > 65535)
          return Fail(Invalid("--mirror-listen wants IPv4ADDR[:PORT]", f.mirror_listen));
        port = static_cast<uint16_t>(v);
      }
    }
    auto taken = (*node)->ServeMirrorPeers(host, port, &mirror_peers);
    if (!taken.ok())
      return Fail(taken.status().Context("serve the package mirror (see --mirror-listen)"));
    mirror = host + ":" + std::to_string(*taken);
  }

  const cluster::Resources capacity = Capacity(f.data_dir);
  const std::string started_at = NowRfc3339();
  node::LocalNode* local = node->get();
  auto snapshot = [&, local]() {
    cluster::NodeRecord r;
    r.name = f.name;
    r.address = "http://" + advertise;
    r.mirror = mirror;
    r.capacity = capacity;
    r.labels = labels;
    r.started_at = started_at;
    // Its overcommit as the node admits it (node/density): placement honours it.
    r.memory_overcommit = nopts->density.memory_overcommit;
    r.cpu_overcommit = nopts->density.cpu_overcommit;
    nlohmann::json info = local->Info();
    for (const auto& b : info.value("backends", nlohmann::json::array()))
      if (b.is_string())
        if (auto kind = runtime::ParseBackendKind(b.get<std::string>())) r.backends.insert(*kind);
    r.sandboxes = info.value("sandboxes", int64_t{0});
    r.layers = layers.ListDigests();
    return r;
  };
  cluster::NodeHeartbeat heartbeat(&etcd, f.ttl_s, snapshot);
  // What runs here against the records: at the start (the API servers marked our sandboxes
  // lost when this node went) and whenever the node joins again after its lease expired.
  auto reconcile = [&etcd, local, &f] {
    auto r = cluster::ReconcileNode(&etcd, local, f.name, local->SandboxIds());
    if (r.readmitted || r.reaped)
      spdlog::info("node {}: {} lost sandbox(es) running again, {} without a record deleted",
                   f.name, r.readmitted, r.reaped);
  };
  heartbeat.SetOnRejoin(reconcile);
  if (Status st = heartbeat.Start(); !st.ok()) return Fail(st.Context("join the cluster"));
  reconcile();
  spdlog::info("warren node {}: serving API servers on {} (port {}), data in {}, cgroups {}",
               f.name, f.listen, http.port(), f.data_dir, isolation::CgroupLayoutName());

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("warren node {}: signal {}, leaving the cluster", f.name, sig);
  // Out of placement first, then no more requests; a clean stop deletes the sandboxes (only a
  // crash or kill -9 leaves them for adoption), and the API servers mark them lost.
  heartbeat.Stop(/*leave=*/true);
  http.Stop();
  (*node)->calls()->Shutdown();  // its runners, before every sandbox goes
  (*node)->DeleteAll();
  return 0;
}

}  // namespace

void AddNode(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("node", "run a cluster node on this machine (see `warren apiserver`)");
  auto f = std::make_shared<ClusterNodeFlags>();
  cmd->add_option("--etcd", f->etcd, "etcd endpoints, comma-separated (http://HOST:PORT)");
  cmd->add_option("--listen", f->listen, "ADDR:PORT to serve API servers on");
  cmd->add_option("--advertise", f->advertise,
                  "ADDR:PORT API servers reach this node at (default: --listen)");
  cmd->add_option("--mirror-listen", f->mirror_listen,
                  "IPv4ADDR[:PORT] other nodes' egress proxies fetch package files and metadata "
                  "this node owns from (default: the --advertise address, any free port)");
  cmd->add_option("--data-dir", f->data_dir, "layers cache, exec journals (a real disk)");
  cmd->add_option("--name", f->name, "the node's name in the cluster (unique)");
  cmd->add_option("--layer-store", f->layer_store,
                  "the shared layer store (a directory every node mounts, or http(s)://...)");
  cmd->add_option("--layer-cache-size", f->layer_cache_size,
                  "bound on the layers kept here from the shared store, least recently used "
                  "removed first (e.g. 200G; default: half the data dir's filesystem)");
  Repeatable(cmd->add_option("--label", f->labels,
                             "KEY=VALUE placement can select on (node_selector); repeatable"));
  cmd->add_option("--ttl", f->ttl_s, "seconds without a heartbeat after which the node is down")
      ->check(CLI::Range(2, 60));
  cmd->add_option("--simulate", f->simulate,
                  "run N simulated nodes (NAME-000...) that accept sandboxes without making "
                  "them, to measure API servers and placement at scale (no root needed)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--simulate-cpus", f->sim_cpus, "each simulated node's CPUs (default 192)");
  cmd->add_option("--simulate-memory", f->sim_memory,
                  "each simulated node's memory (default 1536G)");
  cmd->add_option("--simulate-disk", f->sim_disk, "each simulated node's disk (default 4T)");
  AddNodeFlags(cmd, &f->node);
  AddFncallFlags(cmd, &f->fncall);
  AddNodeAdmin(cmd);
  // `warren node` runs a node; `warren node cordon|uncordon|drain NAME` asks the API.
  cmd->require_subcommand(0, 1);
  cmd->callback([f, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    if (f->name.empty()) return void(ExitCode() = Fail(Invalid("warren node wants --name")));
    ExitCode() = RunNode(*f);
  });
}

}  // namespace warren::cli
