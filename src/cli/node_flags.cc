#include "cli/node_flags.h"

#include <limits.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>

#include "base/sha256.h"
#include "base/size.h"

namespace warren::cli {

void PrepareDaemonProcess(sigset_t* sigs) {
  // Signals are taken by sigwait; block them before any thread starts.
  sigemptyset(sigs);
  sigaddset(sigs, SIGINT);
  sigaddset(sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Every sandbox costs the daemon a few fds (agent socket, pidfd): take all we may have.
  if (rlimit nofile; getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &nofile);
  }
}

namespace {

Status DensityOptionsOf(const DensityFlags& f, node::density::DensityOptions* d) {
  d->enabled = !f.off;
  if (!f.memory_budget.empty()) {
    auto bytes = ParseSize(f.memory_budget);
    if (!bytes || *bytes < (64ull << 20))
      return Invalid("--memory-budget wants a size of at least 64M", f.memory_budget);
    d->memory_budget_bytes = *bytes;
    d->enforce_budget = true;
  }
  for (double r : {f.memory_overcommit, f.cpu_overcommit})
    if (r != 0 && r < 1)
      return Invalid("--memory-overcommit and --cpu-overcommit are 0 (no limit) or 1 or more",
                     std::to_string(r));
  d->memory_overcommit = f.memory_overcommit;
  d->cpu_overcommit = f.cpu_overcommit;
  if (f.idle_after_s <= 0 || f.hibernate_after_s < 0 ||
      (f.hibernate_after_s > 0 && f.hibernate_after_s < f.idle_after_s))
    return Invalid("--idle-after is over 0 s and --hibernate-after 0 (never) or at least as long",
                   std::to_string(f.hibernate_after_s));
  d->idle.idle_after = std::chrono::milliseconds(static_cast<int64_t>(f.idle_after_s * 1000));
  d->idle.hibernate_after =
      std::chrono::milliseconds(static_cast<int64_t>(f.hibernate_after_s * 1000));
  // Passes often enough that a short idle period is noticed within a tenth of it.
  d->tick = std::clamp(d->idle.idle_after / 10, std::chrono::milliseconds(100),
                       std::chrono::milliseconds(1000));
  auto swap = node::density::ParseSwapMode(f.swap);
  if (!swap)
    return Invalid(
        "--swap wants auto, zram, zram:SIZE, file:PATH, file:PATH:SIZE (an absolute "
        "path, a size of 16M or more), host or none",
        f.swap);
  d->swap = swap->mode;
  d->swap_bytes = swap->bytes;
  d->swap_file = swap->path;
  return Status::Ok();
}

}  // namespace

Result<node::LocalNodeOptions> LocalNodeOptionsOf(const NodeFlags& f, const std::string& data_dir) {
  const NetFlags& net = f.net;
  const VmFlags& vm = f.vm;
  // One cgroup parent per data dir, so two daemons on a host (tests do that) never touch
  // each other's sandboxes. Sandboxes of an earlier run of this daemon are killed now.
  char real[PATH_MAX];
  std::string key = realpath(data_dir.c_str(), real) ? real : data_dir;
  node::LocalNodeOptions nopts;
  nopts.cgroup_parent = "warren-" + Sha256Hex(key).substr(0, 8);
  nopts.unsafe_no_seccomp_landlock = f.unsafe_no_hardening;
  nopts.lazy.readahead_kb = f.layer_readahead_kb;
  nopts.lazy.fill_page_cache = !f.no_layer_page_fill;
  if (f.unsafe_no_hardening)
    spdlog::warn("UNSAFE: sandboxes run without seccomp and Landlock (benchmark mode)");
  nopts.spill_dir = data_dir + "/execs";
  // Networking names per data dir too: the nftables table, the bridge (15 bytes at most).
  nopts.network = !net.off;
  nopts.net.table = nopts.cgroup_parent;
  nopts.net.bridge = "wr" + Sha256Hex(key).substr(0, 8);
  nopts.net.subnet = net.subnet;
  nopts.net.ipv6 = !net.no_ipv6;
  nopts.net.pool_bare = net.pool;
  nopts.net.pool_wired = net.pool == 0 ? 0 : std::max<size_t>(1, net.pool / 2);
  nopts.net.dns_hosts = net.dns_hosts;
  nopts.net.dns_upstream = net.dns_upstream;
  nopts.net.cache_dir = data_dir + "/egress-cache";
  if (!net.cache_size.empty()) {
    auto bytes = ParseSize(net.cache_size);
    if (!bytes) return Invalid("--proxy-cache-size wants a size like 10G", net.cache_size);
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
        return Invalid("--proxy-intercept wants host names (or *.domain) separated by commas",
                       host);
      nopts.net.intercept.push_back(host);
    }
    start = comma + 1;
  }
  nopts.net.ca_dir = data_dir + "/egress-ca";
  nopts.net.upstream_ca = net.upstream_ca;
  if (auto fresh = warren::net::FreshnessWindows::Parse(net.fresh); fresh.ok())
    nopts.net.fresh = *fresh;
  else
    return Invalid("--proxy-fresh: " + fresh.status().message(), net.fresh);
  if (mkdir(nopts.spill_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", nopts.spill_dir);
  nopts.microvm = !vm.off;
  nopts.vm.kernel = vm.kernel;
  nopts.vm.accel = vm.accel;
  nopts.vm.snapshots = !vm.no_snapshots;
  nopts.vm.warm_pool = vm.warm_pool;
  nopts.warm_pool = static_cast<size_t>(f.warm_pool);
  nopts.vm.cache_dir = vm.cache;
  if (vm.accel != "auto" && vm.accel != "kvm" && vm.accel != "tcg")
    return Invalid("--vm-accel wants auto, kvm or tcg", vm.accel);
  if (size_t slash = vm.cache.rfind('/'); slash != std::string::npos && slash > 0)
    (void)mkdir(vm.cache.substr(0, slash).c_str(), 0755);
  WARREN_RETURN_IF_ERROR(DensityOptionsOf(f.density, &nopts.density));
  return nopts;
}

void AddNodeFlags(CLI::App* cmd, NodeFlags* f) {
  cmd->add_option("--layer-readahead", f->layer_readahead_kb,
                  "KiB the kernel reads ahead in a chunked layer while it is read on demand "
                  "(each page read ahead may be a fetch; a layer whose chunks are all here "
                  "gets the kernel's default)")
      ->check(CLI::Range(0, 16384));
  cmd->add_flag("--no-layer-page-fill", f->no_layer_page_fill,
                "benchmarks only: the block daemon does not put a chunked layer's traced "
                "chunks in the kernel's page cache ahead of reads")
      ->group("");  // hidden from --help
  cmd->add_flag("--unsafe-no-seccomp-landlock", f->unsafe_no_hardening,
                "benchmarks only: sandboxes without seccomp and Landlock")
      ->group("");  // hidden from --help
  cmd->add_option("--warm-pool", f->warm_pool,
                  "ready container sandboxes kept per template in use (its layers and disk size), "
                  "for creates "
                  "with network none; grows with demand up to 16x (default 2; 0: none)")
      ->check(CLI::Range(0, 64));
  NetFlags* net = &f->net;
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
  cmd->add_option(
      "--proxy-fresh", net->fresh,
      "how long registry metadata (npm packuments, PyPI indexes, apt's InRelease and Packages) "
      "is served from the proxy's cache before it is revalidated upstream: seconds for every "
      "registry, or per registry like npm=60,pypi=60,apt=120,other=0 (default)");
  cmd->add_flag("--no-net-ipv6", net->no_ipv6,
                "sandboxes get IPv4 only (their IPv6 then goes through the egress proxy); by "
                "default they get IPv6 too where the host has it and can forward it for them "
                "alone (Linux 6.17's force_forwarding)");
  cmd->add_flag("--no-network", net->off,
                "no sandbox networking: every sandbox gets loopback only");
  VmFlags* vm = &f->vm;
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
  DensityFlags* d = &f->density;
  cmd->add_option("--memory-budget", d->memory_budget,
                  "memory this node's sandboxes may really use, e.g. 8G (the node's cgroup is "
                  "limited to it); default: the host's memory less 1/8 for the host");
  cmd->add_option("--memory-overcommit", d->memory_overcommit,
                  "how far the sandboxes' requested memory may exceed the budget; 0: no limit "
                  "(default 4)");
  cmd->add_option("--cpu-overcommit", d->cpu_overcommit,
                  "how far the sandboxes' requested CPUs may exceed the host's; 0: no limit "
                  "(default 0: each sandbox's quota caps its use)");
  cmd->add_option("--idle-after", d->idle_after_s,
                  "seconds without an operation or CPU use after which a sandbox is idle and "
                  "gives memory back (default 30)");
  cmd->add_option("--hibernate-after", d->hibernate_after_s,
                  "seconds idle after which a sandbox is frozen and paged out, woken by its "
                  "next operation; 0: never (default 300)");
  cmd->add_option("--swap", d->swap,
                  "where idle memory goes: auto (the host's swap, else a zram device of the "
                  "node's), zram[:SIZE] (compressed RAM, half the budget by default), "
                  "file:PATH[:SIZE] (a swap file the node creates on an ext4 or xfs disk, the "
                  "budget by default), host or none (default auto)");
  cmd->add_flag("--no-density", d->off, "no idle reclaim or hibernation on this node");
}

}  // namespace warren::cli
