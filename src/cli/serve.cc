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
#include "server/http_server.h"
#include "server/routes.h"
#include "server/state_store.h"

namespace warren::cli {
namespace {

struct NetFlags {
  std::string subnet = "10.89.0.0/16";
  bool off = false;
  size_t pool = 8;
  std::string dns_hosts, dns_upstream;
  std::string cache_size;
  // HTTPS package hosts whose downloads the proxy caches (docs/design.md, "HTTPS package cache").
  std::string intercept = "pypi.org,files.pythonhosted.org,registry.npmjs.org";
  std::string upstream_ca;
};

struct VmFlags {
  std::string kernel, accel = "auto", cache = "/var/cache/warren/vm";
  bool no_snapshots = false, off = false;
  int warm_pool = 2;
};

struct FncallFlags {
  std::string image;
  int runners = 0;  // 0: one per CPU
  int workers = 4;
};

int Serve(const std::string& listen, const std::string& data_dir, bool unsafe_no_hardening,
          int warm_pool, const FncallFlags& fn, const NetFlags& net, const VmFlags& vm) {
  if (geteuid() != 0)
    return Fail("serve", "warren serve must run as root (it makes namespaces, mounts and cgroups)");
  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Every sandbox costs the daemon a few fds (agent socket, pidfd): take all we may have.
  if (rlimit nofile; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (mkdir(data_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(ErrnoStatus("mkdir", data_dir));
  image::LayerStore layers(data_dir);
  if (Status st = layers.Init(); !st.ok()) return Fail(st);
  auto state = server::StateStore::Open(data_dir + "/state.db");
  if (!state.ok()) return Fail(state.status());
  auto token = server::LoadOrCreateAdminToken(data_dir + "/admin.token");
  if (!token.ok()) return Fail(token.status());

  // One cgroup parent per data dir, so two daemons on a host (tests do that) never touch
  // each other's sandboxes. Sandboxes of an earlier run of this daemon are killed now.
  char real[PATH_MAX];
  std::string key = realpath(data_dir.c_str(), real) ? real : data_dir;
  node::LocalNodeOptions nopts;
  nopts.cgroup_parent = "warren-" + Sha256Hex(key).substr(0, 8);
  nopts.unsafe_no_seccomp_landlock = unsafe_no_hardening;
  if (unsafe_no_hardening)
    spdlog::warn("UNSAFE: sandboxes run without seccomp and Landlock (benchmark mode)");
  nopts.spill_dir = data_dir + "/execs";
  // Networking names per data dir too: the nftables table, the bridge (15 bytes at most).
  nopts.network = !net.off;
  nopts.net.table = nopts.cgroup_parent;
  nopts.net.bridge = "wr" + Sha256Hex(key).substr(0, 8);
  nopts.net.subnet = net.subnet;
  nopts.net.pool_bare = net.pool;
  nopts.net.pool_wired = net.pool == 0 ? 0 : std::max<size_t>(1, net.pool / 2);
  nopts.net.dns_hosts = net.dns_hosts;
  nopts.net.dns_upstream = net.dns_upstream;
  nopts.net.cache_dir = data_dir + "/egress-cache";
  if (!net.cache_size.empty()) {
    auto bytes = ParseSize(net.cache_size);
    if (!bytes) return Fail(Invalid("--proxy-cache-size wants a size like 10G", net.cache_size));
    nopts.net.cache_bytes = *bytes;
  }
  for (size_t start = 0; start < net.intercept.size();) {
    size_t comma = net.intercept.find(',', start);
    if (comma == std::string::npos) comma = net.intercept.size();
    std::string host = net.intercept.substr(start, comma - start);
    host.erase(0, host.find_first_not_of(" \t"));
    host.erase(host.find_last_not_of(" \t") + 1);
    std::string name = host.rfind("*.", 0) == 0 ? host.substr(2) : host;
    if (!host.empty() && host != "none") {
      if (name.empty() ||
          name.find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
              std::string::npos ||
          name.find('.') == std::string::npos)
        return Fail(
            Invalid("--proxy-intercept wants host names (or *.domain) separated by commas", host));
      nopts.net.intercept.push_back(host);
    }
    start = comma + 1;
  }
  nopts.net.ca_dir = data_dir + "/egress-ca";
  nopts.net.upstream_ca = net.upstream_ca;
  if (mkdir(nopts.spill_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Fail(ErrnoStatus("mkdir", nopts.spill_dir));
  nopts.microvm = !vm.off;
  nopts.vm.kernel = vm.kernel;
  nopts.vm.accel = vm.accel;
  nopts.vm.snapshots = !vm.no_snapshots;
  nopts.vm.warm_pool = vm.warm_pool;
  nopts.warm_pool = static_cast<size_t>(warm_pool);
  nopts.vm.cache_dir = vm.cache;
  if (vm.accel != "auto" && vm.accel != "kvm" && vm.accel != "tcg")
    return Fail(Invalid("--vm-accel wants auto, kvm or tcg", vm.accel));
  if (size_t slash = vm.cache.rfind('/'); slash != std::string::npos && slash > 0)
    (void)mkdir(vm.cache.substr(0, slash).c_str(), 0755);

  auto node = node::LocalNode::Start(nopts, &layers);
  if (!node.ok()) return Fail(node.status().Context("start node"));
  server::TokenRegistry tokens(state->get(), *token);
  if (Status st = tokens.Load(); !st.ok()) return Fail(st.Context("load tokens"));
  auto durable = server::StateStore::Open(data_dir + "/state.db", /*durable=*/true);
  if (!durable.ok()) return Fail(durable.status());
  // fncall, a service of the node: the runner pool (POST /v1/calls) and `backend: fncall`
  // sandboxes, whose execs run on it.
  fncall::PoolOptions fopts;
  fopts.default_image = fn.image;
  fopts.max_runners = fn.runners > 0
                          ? fn.runners
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  fopts.workers_per_runner = fn.workers;
  if (!unsafe_no_hardening) {
    auto bpf = isolation::CompileSeccompPolicy(isolation::CallSeccompPolicy());
    if (!bpf.ok()) return Fail(bpf.status().Context("call seccomp policy"));
    fopts.call_seccomp_bpf = *bpf;
  }
  {
    const std::string lib_path = runtime::DefaultZygoteLibPath();
    std::ifstream lib_file(lib_path, std::ios::binary);
    std::ostringstream lib;
    lib << lib_file.rdbuf();
    if (lib_file && !lib.str().empty())
      fopts.zygote_lib = std::make_shared<const std::string>(lib.str());
    else
      spdlog::warn("fncall: cannot read {}: the zygote runs in Python", lib_path);
  }
  server::StateStore* st = state->get();
  auto resolve = [st](const std::string& ref) -> Result<std::vector<std::string>> {
    std::string name, tag;
    WARREN_RETURN_IF_ERROR(server::ParseImageRef(ref, &name, &tag));
    auto rec = st->GetLayer(name, tag);
    if (!rec.ok())
      return Invalid("unknown runner image `" + ref + "` (build one with warren image build)");
    return std::vector<std::string>{rec->digest};
  };
  if (Status st = (*node)->StartFncall(resolve, fopts); !st.ok()) return Fail(st);
  node::SingleNodeFleet fleet(node->get());
  server::Api api(state->get(), durable->get(), &fleet, &layers, &tokens);
  api.SetCalls((*node)->calls());
  // Sandboxes of an earlier run that is gone (kill -9, crash) are taken over; whatever could
  // not be is killed and removed.
  api.ReconcileAfterRestart();
  int stale = (*node)->ReapUnadopted();
  if (stale > 0) spdlog::warn("reaped {} sandbox cgroup(s) left by an earlier run", stale);
  api.SweepBlobs();
  api.StartReaper();
  server::ServerOptions sopts;
  sopts.listen = listen;
  server::ApiService service(&api, &tokens);
  server::HttpServer http(&service, sopts);
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
  auto unsafe = std::make_shared<bool>(false);
  cmd->add_flag("--unsafe-no-seccomp-landlock", *unsafe,
                "benchmarks only: sandboxes without seccomp and Landlock")
      ->group("");  // hidden from --help
  auto warm = std::make_shared<int>(2);
  cmd->add_option("--warm-pool", *warm,
                  "ready container sandboxes kept per template in use (its layers and disk size), "
                  "for creates "
                  "with network none; grows with demand up to 16x (default 2; 0: none)")
      ->check(CLI::Range(0, 64));
  auto fn = std::make_shared<FncallFlags>();
  cmd->add_option(
      "--fncall-image", fn->image,
      "runner image (NAME:TAG) of calls that name none; it needs python3 and the toolchains");
  cmd->add_option("--fncall-runners", fn->runners,
                  "runner sandboxes per runner image at most (default: one per CPU)");
  cmd->add_option("--fncall-workers", fn->workers, "calls running at once in one runner");
  auto net = std::make_shared<NetFlags>();
  cmd->add_option(
      "--net-subnet", net->subnet,
      "IPv4 subnet of sandbox addresses in egress mode; the node takes its first address");
  cmd->add_option("--net-pool", net->pool, "network namespaces kept ready for new sandboxes");
  cmd->add_option(
      "--dns-hosts", net->dns_hosts,
      "file of name overrides for sandboxes (/etc/hosts format), asked before upstream DNS");
  cmd->add_option("--dns-upstream", net->dns_upstream,
                  "DNS server (IP[:PORT]) to resolve allowed names with "
                  "(default: the host's resolv.conf)");
  cmd->add_option("--proxy-cache-size", net->cache_size,
                  "size of the egress proxy's package cache (default 10G)");
  cmd->add_option(
      "--proxy-intercept", net->intercept,
      "HTTPS hosts whose package downloads the proxy caches, answering sandboxes with a "
      "certificate "
      "of the node's CA (comma-separated, *.domain allowed; `none`: no interception; default: "
      "pypi.org,files.pythonhosted.org,registry.npmjs.org)");
  cmd->add_option(
      "--proxy-upstream-ca", net->upstream_ca,
      "CA bundle the proxy verifies intercepted upstream servers with (default: the system's)");
  cmd->add_flag("--no-network", net->off,
                "no sandbox networking: every sandbox gets loopback only");
  auto vm = std::make_shared<VmFlags>();
  cmd->add_option("--vm-kernel", vm->kernel,
                  "guest kernel for microVMs (a vmlinuz; default: the newest in /boot)");
  cmd->add_option("--vm-accel", vm->accel, "auto (probe KVM, else TCG), kvm or tcg");
  cmd->add_option("--vm-cache", vm->cache,
                  "guest images and template snapshots (content-addressed, shared by daemons)");
  cmd->add_flag("--no-vm-snapshots", vm->no_snapshots,
                "boot every microVM cold instead of restoring a template");
  cmd->add_option("--vm-warm-pool", vm->warm_pool,
                  "restored microVMs kept waiting per size in use, for creates with network none "
                  "(default 2; 0: none)")
      ->check(CLI::Range(0, 64));
  cmd->add_flag("--no-microvm", vm->off, "no microvm backend on this node");
  cmd->callback([listen, data_dir, unsafe, warm, fn, net, vm] {
    ExitCode() = Serve(*listen, *data_dir, *unsafe, *warm, *fn, *net, *vm);
  });
}

}  // namespace warren::cli
