// One thread reading every agent socket of the node (epoll), so the node holds no thread
// per sandbox. It only parses and routes messages; it never blocks on anything else.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "node/agent_conn.h"

namespace warren::node {

class AgentMux {
 public:
  AgentMux();
  ~AgentMux();
  Status Start();
  void Add(const std::shared_ptr<AgentConn>& conn);
  void Remove(const std::shared_ptr<AgentConn>& conn);
  // Called (on the mux thread) when an agent's socket closes unexpectedly.
  void SetOnClosed(std::function<void(const std::string& sandbox_id)> fn) {
    on_closed_ = std::move(fn);
  }

 private:
  void Loop();
  UniqueFd epoll_, wake_;
  std::thread thread_;
  Mutex mu_;
  uint64_t next_key_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::shared_ptr<AgentConn>> conns_ GUARDED_BY(mu_);
  std::map<AgentConn*, uint64_t> keys_ GUARDED_BY(mu_);
  std::function<void(const std::string&)> on_closed_;  // set before the first Add
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace warren::node
