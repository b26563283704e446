// NodeReports: what each node of a cluster says of itself (its network and proxy counters,
// fncall runners, pools, uid slots), which its etcd record leaves out: the record is for
// placement, written at most once a second by every node, and must stay small. An API server's
// /v1/nodes and /metrics ask for the reports when they are read: a round asks every ready
// node (a few at a time) on a thread of its own, and the reader waits for a round that began
// after it asked, at most `wait`, and takes what has come: a reader sees what happened
// before it asked (a test's download counted, a runner started). A node that does not answer
// (stopped, unreachable) delays no reader beyond that and is listed from its record alone.
// Readers that arrive while a round runs share the one round after it, so a storm of
// scrapes costs one round at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace warren::cluster {

struct NodeReportsOptions {
  std::chrono::milliseconds wait{1500};   // the longest a reader waits for a round
  std::chrono::milliseconds keep{30000};  // an older report is left out (its node is silent)
  int parallel = 8;                       // nodes asked at once
};

class NodeReports {
 public:
  // `names`: the nodes to ask now. `ask(name)`: that node's report, or null if it gave none.
  NodeReports(std::function<std::vector<std::string>()> names,
              std::function<nlohmann::json(const std::string&)> ask, NodeReportsOptions opts = {});
  ~NodeReports();  // ends the thread after the round under way

  // The reports by node name, no older than `keep`, after a round that began after this call
  // (waited for at most `wait`).
  std::map<std::string, nlohmann::json> Get();

 private:
  struct Report {
    nlohmann::json info;
    std::chrono::steady_clock::time_point at;
  };
  void Loop();
  void Round();

  const std::function<std::vector<std::string>()> names_;
  const std::function<nlohmann::json(const std::string&)> ask_;
  const NodeReportsOptions opts_;
  Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, Report> reports_ GUARDED_BY(mu_);
  uint64_t asked_ GUARDED_BY(mu_) = 0;    // the last round a reader asked for
  uint64_t started_ GUARDED_BY(mu_) = 0;  // the last round begun
  uint64_t done_ GUARDED_BY(mu_) = 0;     // the last round finished
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace warren::cluster
