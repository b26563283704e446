// warren serve [--listen ADDR:PORT] [--data-dir DIR]: API server + one node in one process.
#include <limits.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/sha256.h"
#include "base/size.h"
#include "cli/common.h"
#include "cli/fncall_flags.h"
#include "cli/node_flags.h"
#include "image/layer_store.h"
#include "isolation/cgroup.h"
#include "isolation/seccomp_policy.h"
#include "node/fleet.h"
#include "node/fncall/call_pool.h"
#include "node/local_node.h"
#include "runtime/container/agent_binary.h"
#include "server/api_service.h"
#include "server/api_types.h"
#include "server/auth.h"
#include "server/e2b/e2b_service.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/service_chain.h"
#include "server/state_store.h"
#include "server/ui_service.h"

namespace warren::cli {
namespace {

// Where `warren serve` keeps its layers: its data dir (default), or a layer store of its own
// elsewhere (`--layer-store DIR`), which its node then reads as a cluster node reads the
// shared one: chunked layers on demand through blobfsd (`--layer-format chunked`).
struct ServeLayerFlags {
  std::string store, store_url, format = "whole", cache_size;
};

Result<image::LayerFormat> LayerFormatOf(const std::string& name) {
  if (name == "whole") return image::LayerFormat::kWhole;
  if (name == "chunked") return image::LayerFormat::kChunked;
  return Invalid("--layer-format is whole or chunked", name);
}

int Serve(const std::string& listen, const std::string& data_dir, const NodeFlags& nf,
          const FncallFlags& fn, const ServeLayerFlags& lf) {
  if (geteuid() != 0)
    return Fail("serve", "warren serve must run as root (it makes namespaces, mounts and cgroups)");
  sigset_t sigs;
  PrepareDaemonProcess(&sigs);

  if (mkdir(data_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(ErrnoStatus("mkdir", data_dir));
  image::LayerStore layers(data_dir);
  if (Status st = layers.Init(); !st.ok()) return Fail(st);
  auto format = LayerFormatOf(lf.format);
  if (!format.ok()) return Fail(format.status());
  if (*format == image::LayerFormat::kChunked && lf.store.empty())
    return Fail(Invalid("--layer-format chunked needs --layer-store: chunks load from a store"));
  // With a store of its own, the API publishes there and the node reads from it.
  std::unique_ptr<image::LayerStore> api_layers;
  std::unique_ptr<image::BlobSource> source;
  if (!lf.store.empty()) {
    if (lf.store[0] != '/')
      return Fail(Invalid("--layer-store wants an absolute directory", lf.store));
    if (mkdir(lf.store.c_str(), 0755) != 0 && errno != EEXIST)
      return Fail(ErrnoStatus("mkdir", lf.store));
    api_layers = std::make_unique<image::LayerStore>(lf.store);
    if (Status st = api_layers->Init(); !st.ok()) return Fail(st.Context("open the layer store"));
    api_layers->SetFormat(*format);
    auto s = image::OpenBlobSource(lf.store_url.empty() ? lf.store : lf.store_url);
    if (!s.ok()) return Fail(s.status());
    source = std::move(*s);
    layers.SetSource(source.get());
    uint64_t cache_mb = 0;
    if (!lf.cache_size.empty()) {
      auto mb = SizeMb(lf.cache_size, "--layer-cache-size");
      if (!mb.ok()) return Fail(mb.status());
      cache_mb = *mb;
    }
    layers.SetCacheLimit(cache_mb << 20);
  }
  auto state = server::StateStore::Open(data_dir + "/state.db");
  if (!state.ok()) return Fail(state.status());
  auto token = server::LoadOrCreateAdminToken(data_dir + "/admin.token");
  if (!token.ok()) return Fail(token.status());

  auto nopts = LocalNodeOptionsOf(nf, data_dir);
  if (!nopts.ok()) return Fail(nopts.status());
  if (source) {
    nopts->lazy.store_root = data_dir;
    nopts->lazy.source = source->Describe();
    // The store's directory is this machine's: blobfsd publishes traces and packs there even
    // when it reads through the URL.
    if (!lf.store_url.empty()) nopts->lazy.publish = lf.store;
    nopts->lazy.run_dir = data_dir + "/blobfs";
    if (auto mb = SizeMb(lf.cache_size.empty() ? "0" : lf.cache_size, "--layer-cache-size");
        mb.ok())
      nopts->lazy.cache_bytes = *mb << 20;
  }
  auto node = node::LocalNode::Start(*nopts, &layers);
  if (!node.ok()) return Fail(node.status().Context("start node"));
  server::TokenRegistry tokens(state->get(), *token);
  if (Status st = tokens.Load(); !st.ok()) return Fail(st.Context("load tokens"));
  auto durable = server::StateStore::Open(data_dir + "/state.db", /*durable=*/true);
  if (!durable.ok()) return Fail(durable.status());
  // fncall, a service of the node: the runner pool (POST /v1/calls) and `backend: fncall`
  // sandboxes, whose execs run on it.
  auto fopts = FncallPoolOptionsOf(fn, !nf.unsafe_no_hardening);
  if (!fopts.ok()) return Fail(fopts.status());
  if (Status st = (*node)->StartFncall(RunnerImageResolver(state->get()), *fopts); !st.ok())
    return Fail(st);
  node::SingleNodeFleet fleet(node->get());
  server::Api api(state->get(), durable->get(), &fleet, api_layers ? api_layers.get() : &layers,
                  &tokens);
  api.SetCalls((*node)->calls());
  // Sandboxes of an earlier run that is gone (kill -9, crash) are taken over; whatever could
  // not be is killed and removed.
  api.ReconcileAfterRestart();
  int stale = (*node)->ReapUnadopted();
  if (stale > 0) spdlog::warn("reaped {} sandbox cgroup(s) left by an earlier run", stale);
  api.SweepBlobs();
  api.StartReaper();
  api.StartHistory();
  server::ServerOptions sopts;
  sopts.listen = listen;
  server::ApiService service(&api, &tokens);
  // E2B's API beside the contract's, on the same port (docs/e2b.md).
  server::e2b::E2bService e2b(&api, &tokens, *token);
  server::ServiceChain both(&service, &e2b);
  // The dashboard at /ui (docs/design.md, "Dashboard").
  server::UiService ui;
  server::ServiceChain all(&both, &ui);
  server::HttpServer http(&all, sopts);
  if (Status st = http.Start(); !st.ok()) return Fail(st);
  spdlog::info(
      "warren serve: listening on {} (port {}), data in {}, admin token in {}/admin.token, cgroups "
      "{}",
      listen, http.port(), data_dir, data_dir, isolation::CgroupLayoutName());

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("warren serve: signal {}, shutting down", sig);
  http.Stop();
  api.StopReaper();
  api.StopCalls();
  // A clean stop deletes the sandboxes (only a crash or kill -9 leaves them for re-adoption).
  (*node)->DeleteAll();
  api.MarkAllStopped();
  return 0;
}

}  // namespace

void AddServe(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "run the API server and a node on this machine");
  auto listen = std::make_shared<std::string>("127.0.0.1:7070");
  auto data_dir = std::make_shared<std::string>("/var/lib/warren");
  cmd->add_option("--listen", *listen, "ADDR:PORT to serve HTTP on");
  cmd->add_option("--data-dir", *data_dir,
                  "state, layers and the admin token (a real disk, not tmpfs)");
  auto nf = std::make_shared<NodeFlags>();
  AddNodeFlags(cmd, nf.get());
  auto fn = std::make_shared<FncallFlags>();
  AddFncallFlags(cmd, fn.get());
  auto lf = std::make_shared<ServeLayerFlags>();
  cmd->add_option("--layer-store", lf->store,
                  "keep layers in this directory (this server's own store) instead of the data "
                  "dir; the node reads them from it as a cluster node reads the shared store");
  cmd->add_option("--layer-store-url", lf->store_url,
                  "where the node reads --layer-store from, when not the directory itself "
                  "(http(s)://..., e.g. a server over that directory)");
  cmd->add_option("--layer-format", lf->format,
                  "how built layers are stored: whole (one EROFS image, copied to the node "
                  "before use) or chunked (metadata plus 64 KiB chunks, read on demand; needs "
                  "--layer-store)");
  cmd->add_option("--layer-cache-size", lf->cache_size,
                  "with --layer-store: bound on the layers and chunks the node keeps (e.g. 50G)");
  cmd->callback(
      [listen, data_dir, nf, fn, lf] { ExitCode() = Serve(*listen, *data_dir, *nf, *fn, *lf); });
}

}  // namespace warren::cli
