#include "server/metrics.h"

#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

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

std::string RenderNodeMetrics(const json& node) {
  std::ostringstream o;
  o << "# TYPE warren_node_sandboxes gauge\nwarren_node_sandboxes " << node.value("sandboxes", 0)
    << "\n";
  o << "# TYPE warren_node_layer_mounts gauge\nwarren_node_layer_mounts "
    << node.value("layer_mounts", 0) << "\n";
  o << "# TYPE warren_node_uid_slots gauge\n"
    << "warren_node_uid_slots{state=\"used\"} " << node.value("uid_slots_used", 0) << "\n"
    << "warren_node_uid_slots{state=\"total\"} " << node.value("uid_slots", 0) << "\n";
  o << "# TYPE warren_node_cpus gauge\nwarren_node_cpus " << std::thread::hardware_concurrency()
    << "\n";
  if (FILE* f = fopen("/proc/meminfo", "re")) {
    char key[64];
    unsigned long long kb;
    o << "# TYPE warren_node_memory_bytes gauge\n";
    while (fscanf(f, "%63s %llu kB\n", key, &kb) == 2) {
      if (!strcmp(key, "MemTotal:"))
        o << "warren_node_memory_bytes{kind=\"total\"} " << kb * 1024 << "\n";
      if (!strcmp(key, "MemAvailable:"))
        o << "warren_node_memory_bytes{kind=\"available\"} " << kb * 1024 << "\n";
    }
    fclose(f);
  }
  // Egress through the node's proxy: bytes fetched upstream and served from its package
  // cache, in total and per sandbox, with connections and refusals.
  json net = node.value("network", json::object());
  json proxy = net.value("proxy", json::object());
  if (!proxy.is_object()) proxy = json::object();
  o << "# TYPE warren_egress_bytes_total counter\n"
    << "warren_egress_bytes_total{source=\"upstream\"} "
    << proxy.value("upstream_bytes", uint64_t{0}) << "\n"
    << "warren_egress_bytes_total{source=\"cache\"} " << proxy.value("cache_bytes", uint64_t{0})
    << "\n";
  json per = proxy.value("sandboxes", json::object());
  o << "# TYPE warren_egress_sandbox_bytes_total counter\n";
  for (auto& [id, b] : per.items())
    o << "warren_egress_sandbox_bytes_total{sandbox=\"" << id << "\",source=\"upstream\"} "
      << b.value("upstream_bytes", uint64_t{0}) << "\n"
      << "warren_egress_sandbox_bytes_total{sandbox=\"" << id << "\",source=\"cache\"} "
      << b.value("cache_bytes", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_connections_total counter\n";
  for (auto& [id, b] : per.items())
    o << "warren_egress_connections_total{sandbox=\"" << id << "\"} "
      << b.value("connections", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_refused_total counter\n"
    << "warren_egress_refused_total " << proxy.value("refused", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_cache_bytes gauge\n"
    << "warren_egress_cache_bytes " << proxy.value("cache_size_bytes", uint64_t{0}) << "\n";
  json dns = net.value("dns", json::object());
  if (dns.is_object()) {
    o << "# TYPE warren_dns_queries_total counter\n";
    for (const char* k : {"answered", "refused", "failed"})
      o << "warren_dns_queries_total{result=\"" << k << "\"} " << dns.value(k, uint64_t{0}) << "\n";
  }

  return o.str();
}

}  // namespace warren::server
