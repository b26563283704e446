// /metrics: the API's own series (sandboxes by backend and state, errors by code) and the
// node's (capacity, usage, egress), in the Prometheus text exposition format. Each part is
// rendered from what its owner keeps as it goes: a scrape reads no sandbox records.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/sandbox_table.h"

namespace warren::server {

// API errors by code (warren_api_errors_total), every code the contract names included.
class ErrorCounts {
 public:
  void Count(Code code);
  std::string Render() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, uint64_t> counts_ GUARDED_BY(mu_);
};

// warren_sandboxes{backend,state}: every backend and state the contract names has its sample,
// 0 included, so a scraper (or a test) finds the series before the first sandbox exists.
std::string RenderSandboxMetrics(SandboxTable::Counts counts);

// The nodes' capacity and usage, and egress through their proxies (from Fleet::Infos()):
// each family once, a cluster's samples labelled with their node.
std::string RenderNodeMetrics(const std::vector<nlohmann::json>& nodes);

}  // namespace warren::server
