// The flags of a machine that runs sandboxes (network, microVMs, warm pool, hardening), shared
// by `warren serve` (the API and its node in one process) and `warren node` (a cluster node),
// and the process set-up every such daemon needs.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "node/local_node.h"

namespace warren::cli {

struct NetFlags {
  std::string subnet = "10.89.0.0/16";
  bool off = false;
  bool no_ipv6 = false;  // --no-net-ipv6
  size_t pool = 8;
  std::string dns_hosts, dns_upstream;
  std::string cache_size;
  // HTTPS package hosts whose downloads the proxy caches (docs/design.md, "HTTPS package cache").
  std::string intercept = "pypi.org,files.pythonhosted.org,registry.npmjs.org";
  std::string upstream_ca;
  std::string fresh;  // --proxy-fresh
};

struct VmFlags {
  std::string kernel, accel = "auto", cache = "/var/cache/warren/vm";
  bool no_snapshots = false, off = false;
  int warm_pool = 2;
};

// Overcommit, reclaim and hibernation (node/density/density_manager.h).
struct DensityFlags {
  std::string memory_budget;  // "": the host's memory less a reserve
  double memory_overcommit = 4.0, cpu_overcommit = 0;
  double idle_after_s = 30, hibernate_after_s = 300;
  std::string swap = "auto";
  bool off = false;
};

struct NodeFlags {
  bool unsafe_no_hardening = false;
  int warm_pool = 2;
  NetFlags net;
  VmFlags vm;
  DensityFlags density;
  // Readahead of a chunked layer's mount while read on demand (LazyLayersOptions).
  uint32_t layer_readahead_kb = node::kLazyReadaheadKb;
  bool no_layer_page_fill = false;  // LazyLayersOptions::fill_page_cache off
};

void AddNodeFlags(CLI::App* cmd, NodeFlags* f);

// The node's options for data dir `data_dir` (created): cgroup parent, nftables table and
// bridge named after it, so that two daemons on one host never touch each other's sandboxes.
Result<node::LocalNodeOptions> LocalNodeOptionsOf(const NodeFlags& f, const std::string& data_dir);

// Blocks SIGINT and SIGTERM (returned in `sigs`, for sigwait) before any thread starts,
// ignores SIGPIPE and raises the open-file limit: every sandbox costs a daemon a few fds.
void PrepareDaemonProcess(sigset_t* sigs);

}  // namespace warren::cli
