#include "server/metrics.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace warren::server {

using nlohmann::json;

void ErrorCounts::Count(Code code) {
  MutexLock lock(&mu_);
  ++counts_[CodeName(code)];
}

std::string ErrorCounts::Render() const {
  std::map<std::string, uint64_t> all;
  for (const char* code : {"not_found", "invalid", "conflict", "quota", "unauthorized", "forbidden",
                           "unavailable", "internal"})
    all[code] = 0;
  {
    MutexLock lock(&mu_);
    for (auto& [code, n] : counts_) all[code] = n;
  }
  std::ostringstream o;
  o << "# TYPE warren_api_errors_total counter\n";
  for (auto& [code, n] : all) o << "warren_api_errors_total{code=\"" << code << "\"} " << n << "\n";
  return o.str();
}

std::string RenderSandboxMetrics(SandboxTable::Counts counts) {
  for (runtime::BackendKind backend : runtime::kAllBackendKinds)
    for (SandboxState st : kAllSandboxStates) counts.try_emplace({backend, st}, 0);
  std::ostringstream o;
  o << "# TYPE warren_sandboxes gauge\n";
  for (auto& [k, n] : counts)
    o << "warren_sandboxes{backend=\"" << runtime::BackendName(k.first) << "\",state=\""
      << StateName(k.second) << "\"} " << n << "\n";
  return o.str();
}

namespace {

// Samples gathered family by family, so that each family's TYPE line is written once however
// many nodes contribute (a repeated TYPE line makes Prometheus reject the whole scrape).
class Families {
 public:
  // `labels`: the sample's own labels, without braces ("" for none).
  void Add(const std::string& name, const char* type, const std::string& labels,
           const std::string& value) {
    auto [it, fresh] = index_.try_emplace(name, order_.size());
    if (fresh) order_.push_back({name, type, {}});
    order_[it->second].samples.push_back(labels.empty() ? name + " " + value
                                                        : name + "{" + labels + "} " + value);
  }
  std::string Render() const {
    std::ostringstream o;
    for (const auto& f : order_) {
      o << "# TYPE " << f.name << " " << f.type << "\n";
      for (const auto& line : f.samples) o << line << "\n";
    }
    return o.str();
  }

 private:
  struct Family {
    std::string name, type;
    std::vector<std::string> samples;
  };
  std::vector<Family> order_;
  std::map<std::string, size_t> index_;
};

std::string Join(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + "," + b;
}

template <typename T>
std::string Num(T v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Chunked layers read through the node's blobfsd: per layer, and its chunk cache.
void AddLayersOnDemand(Families& f, const json& lod, const std::string& node) {
  if (!lod.is_object() || !lod.contains("cache")) return;
  const auto g = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "gauge", Join(node, labels), v);
  };
  const auto c = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "counter", Join(node, labels), v);
  };
  const json cache = lod["cache"].is_object() ? lod["cache"] : json::object();
  g("warren_chunk_cache_bytes", "", Num(cache.value("bytes", uint64_t{0})));
  g("warren_chunk_cache_limit_bytes", "", Num(cache.value("high_bytes", uint64_t{0})));
  c("warren_chunk_cache_evictions_total", "", Num(cache.value("evictions", uint64_t{0})));
  c("warren_chunk_cache_write_errors_total", "", Num(cache.value("write_errors", uint64_t{0})));
  c("warren_blobfsd_restarts_total", "", Num(lod.value("restarts", uint64_t{0})));
  const json layers = lod.value("layers", json::array());
  if (!layers.is_array()) return;
  for (const json& l : layers) {
    if (!l.is_object()) continue;
    const std::string layer = "layer=\"" + l.value("layer", std::string("?")) + "\"";
    const auto u = [&](const char* k) { return Num(l.value(k, uint64_t{0})); };
    c("warren_layer_fetched_bytes_total", layer, u("fetched_bytes"));
    c("warren_layer_read_bytes_total", layer, u("read_bytes"));
    g("warren_layer_bytes", layer, u("blob_bytes"));
    c("warren_layer_chunk_reads_total", Join(layer, "result=\"hit\""), u("hits"));
    c("warren_layer_chunk_reads_total", Join(layer, "result=\"miss\""), u("misses"));
    c("warren_layer_fetches_total", layer, u("fetches"));
    c("warren_layer_fetch_seconds_total", layer, Num(l.value("fetch_seconds_sum", 0.0)));
    g("warren_layer_fetch_seconds_max", layer, Num(l.value("fetch_seconds_max", 0.0)));
    c("warren_layer_prefetched_chunks_total", layer, u("prefetched"));
    c("warren_layer_prefetch_hits_total", layer, u("prefetch_hits"));
    c("warren_layer_packed_chunks_total", layer, u("packed"));
    c("warren_layer_page_cached_chunks_total", layer, u("page_cached"));
    c("warren_layer_read_errors_total", layer, u("errors"));
  }
}

// Density (node/density): overcommit in use, reclaimed bytes, swap, sandboxes by activity,
// wakes.
void AddDensity(Families& f, const json& d, const std::string& node) {
  if (!d.is_object() || !d.contains("memory_budget_bytes")) return;
  const auto g = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "gauge", Join(node, labels), v);
  };
  const auto c = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "counter", Join(node, labels), v);
  };
  const auto u = [&](const json& j, const char* k) { return Num(j.value(k, uint64_t{0})); };
  g("warren_node_memory_budget_bytes", "", u(d, "memory_budget_bytes"));
  g("warren_node_memory_used_bytes", "", u(d, "used_bytes"));
  g("warren_node_memory_committed_bytes", "", u(d, "committed_memory_bytes"));
  g("warren_node_cpus_committed", "", Num(d.value("committed_cpus", 0.0)));
  g("warren_node_memory_overcommit_ratio", "", Num(d.value("memory_overcommit", 0.0)));
  c("warren_node_reclaimed_bytes_total", "", u(d, "reclaimed_bytes"));
  c("warren_node_pressure_reclaims_total", "", u(d, "pressure_reclaims"));
  c("warren_node_refused_creates_total", "", u(d, "refused_creates"));
  c("warren_sandbox_wakes_total", "", u(d, "wakes"));
  g("warren_sandbox_wake_seconds", "quantile=\"0.5\"", Num(d.value("wake_p50_ms", 0.0) / 1000));
  g("warren_sandbox_wake_seconds", "quantile=\"0.99\"", Num(d.value("wake_p99_ms", 0.0) / 1000));
  const json counts = d.value("sandboxes", json::object());
  if (counts.is_object())
    for (auto& [a, n] : counts.items())
      g("warren_sandboxes_by_activity", "activity=\"" + a + "\"", Num(n.get<int64_t>()));
  const json swap = d.value("swap", json::object());
  if (swap.is_object()) {
    g("warren_node_swap_bytes", "", u(swap, "size_bytes"));
    g("warren_node_swap_used_bytes", "", u(swap, "used_bytes"));
    g("warren_node_swap_ram_bytes", "", u(swap, "ram_bytes"));
  }
}

// One node's samples; `node` is its label ("" for warren serve's one node).
void AddNode(Families& f, const json& info, const std::string& node) {
  const auto g = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "gauge", Join(node, labels), v);
  };
  const auto c = [&](const std::string& name, const std::string& labels, const std::string& v) {
    f.Add(name, "counter", Join(node, labels), v);
  };
  g("warren_node_sandboxes", "", Num(info.value("sandboxes", 0)));
  if (info.contains("layer_mounts"))
    g("warren_node_layer_mounts", "", Num(info.value("layer_mounts", 0)));
  if (info.contains("uid_slots")) {
    g("warren_node_uid_slots", "state=\"used\"", Num(info.value("uid_slots_used", 0)));
    g("warren_node_uid_slots", "state=\"total\"", Num(info.value("uid_slots", 0)));
  }
  // A cluster node's record carries its capacity and what placement reserved there; warren
  // serve's node is this machine.
  if (info.contains("capacity")) {
    const json cap = info["capacity"], res = info.value("reserved", json::object());
    const int64_t total_mb = cap.value("memory_mb", int64_t{0});
    const int64_t free_mb = std::max<int64_t>(0, total_mb - res.value("memory_mb", int64_t{0}));
    g("warren_node_cpus", "", Num(cap.value("cpu_milli", int64_t{0}) / 1000.0));
    g("warren_node_memory_bytes", "kind=\"total\"", Num(total_mb << 20));
    g("warren_node_memory_bytes", "kind=\"available\"", Num(free_mb << 20));
    g("warren_node_reserved_cpus", "", Num(res.value("cpu_milli", int64_t{0}) / 1000.0));
  } else {
    g("warren_node_cpus", "", Num(std::thread::hardware_concurrency()));
    if (FILE* file = fopen("/proc/meminfo", "re")) {
      char key[64];
      unsigned long long kb;
      while (fscanf(file, "%63s %llu kB\n", key, &kb) == 2) {
        if (!strcmp(key, "MemTotal:"))
          g("warren_node_memory_bytes", "kind=\"total\"", Num(kb * 1024));
        if (!strcmp(key, "MemAvailable:"))
          g("warren_node_memory_bytes", "kind=\"available\"", Num(kb * 1024));
      }
      fclose(file);
    }
  }
  // A cluster's nodes run the fncall runner pools; warren serve's own is rendered by its
  // CallGate (server/call_gate.h), so only labelled nodes give these here.
  const json fn = info.value("fncall", json::object());
  if (!node.empty() && fn.is_object() && fn.contains("runners") && fn["runners"].is_array()) {
    c("warren_calls_total", "", Num(fn.value("calls", uint64_t{0})));
    c("warren_call_runs_total", "", Num(fn.value("runs", uint64_t{0})));
    g("warren_fncall_runners", "", Num(fn["runners"].size()));
    c("warren_fncall_runner_starts_total", "", Num(fn.value("runner_starts", uint64_t{0})));
  }
  // Egress through the node's proxy: bytes fetched upstream and served from its package
  // cache, in total and per sandbox, with connections and refusals.
  json net = info.value("network", json::object());
  json proxy = net.is_object() ? net.value("proxy", json::object()) : json::object();
  if (!proxy.is_object()) proxy = json::object();
  c("warren_egress_bytes_total", "source=\"upstream\"",
    Num(proxy.value("upstream_bytes", uint64_t{0})));
  c("warren_egress_bytes_total", "source=\"cache\"", Num(proxy.value("cache_bytes", uint64_t{0})));
  json per = proxy.value("sandboxes", json::object());
  if (!per.is_object()) per = json::object();
  for (auto& [id, b] : per.items()) {
    const std::string sb = "sandbox=\"" + id + "\"";
    c("warren_egress_sandbox_bytes_total", Join(sb, "source=\"upstream\""),
      Num(b.value("upstream_bytes", uint64_t{0})));
    c("warren_egress_sandbox_bytes_total", Join(sb, "source=\"cache\""),
      Num(b.value("cache_bytes", uint64_t{0})));
    c("warren_egress_connections_total", sb, Num(b.value("connections", uint64_t{0})));
  }
  c("warren_egress_refused_total", "", Num(proxy.value("refused", uint64_t{0})));
  // The package cache per registry: what each request got (hit: served unasked; revalidated:
  // a 304 upstream; miss: no copy; changed: a new copy; collapsed: served from another
  // client's fetch; peer: served by the cluster node owning it) and the bytes it took from
  // upstream, from this node's cache and from peers.
  json regs = proxy.value("registries", json::object());
  if (regs.is_object())
    for (auto& [name, r] : regs.items()) {
      if (!r.is_object()) continue;
      const std::string reg = "registry=\"" + name + "\"";
      for (const char* result : {"hit", "revalidated", "miss", "changed", "collapsed", "peer"})
        c("warren_package_cache_requests_total",
          Join(reg, std::string("result=\"") + result + "\""), Num(r.value(result, uint64_t{0})));
      c("warren_package_cache_bytes_total", Join(reg, "source=\"upstream\""),
        Num(r.value("upstream_bytes", uint64_t{0})));
      c("warren_package_cache_bytes_total", Join(reg, "source=\"cache\""),
        Num(r.value("cache_bytes", uint64_t{0})));
      c("warren_package_cache_bytes_total", Join(reg, "source=\"peer\""),
        Num(r.value("peer_bytes", uint64_t{0})));
    }
  AddLayersOnDemand(f, info.value("layers_on_demand", json::object()), node);
  AddDensity(f, info.value("density", json::object()), node);
  g("warren_egress_cache_bytes", "", Num(proxy.value("cache_size_bytes", uint64_t{0})));
  json dns = net.is_object() ? net.value("dns", json::object()) : json::object();
  if (dns.is_object())
    for (const char* k : {"answered", "refused", "failed"})
      c("warren_dns_queries_total", std::string("result=\"") + k + "\"",
        Num(dns.value(k, uint64_t{0})));
}

}  // namespace

std::string RenderNodeMetrics(const std::vector<json>& nodes) {
  Families f;
  // warren serve's one node is the server itself: no label. A cluster's are told apart.
  const bool label = nodes.size() > 1 || (nodes.size() == 1 && nodes[0].contains("capacity"));
  for (const json& n : nodes)
    AddNode(f, n, label ? "node=\"" + n.value("name", std::string("?")) + "\"" : "");
  return f.Render();
}

}  // namespace warren::server
