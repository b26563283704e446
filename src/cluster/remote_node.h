// RemoteNode: a cluster node as an API server reaches it (node::NodeApi over the node's HTTP
// API, cluster/node_service.h, with the cluster credential). ClusterFleet makes one per node
// run it talks to.
//
// Exec records are mirrored: the API code holds ExecRecords (it waits on them, streams them,
// sets finishers on them), so StartExec and GetExec give a local record fed by the node's
// stream of that exec on a thread of its own. Chunks keep the node's sequence numbers, so a
// client that resumes with `?after=SEQ` at another API server (which mirrors the same exec
// from the node) reads on exactly where it stopped. A broken stream resumes after the last
// chunk received; a node unreachable for longer than `give_up_s` ends the mirror with an
// error (the node is gone, and its sandboxes are lost).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "client/http_client.h"
#include "node/node_api.h"

namespace warren::cluster {

struct RemoteNodeOptions {
  int dead_peer_s = 30;     // a connection to a vanished machine fails after this
  int give_up_s = 60;       // a mirror of an unreachable node ends after this
  int lost_poll_ms = 1000;  // how often the node is asked for sandboxes whose agent died
  // A stream silent this long is broken (the node sends a heartbeat line every 15 s), even
  // if its connection looks alive (a stopped node process): it is reconnected.
  int stall_s = 45;
  size_t keep_finished = 1024;               // finished mirrors kept for later reads
  uint64_t keep_finished_bytes = 256 << 20;  // ... holding at most this much output
};

class RemoteNode : public node::NodeApi {
 public:
  // `url`: http://ADDR:PORT of the node's API.
  RemoteNode(std::string name, std::string url, std::string credential,
             RemoteNodeOptions opts = {});
  // Ends every mirror's stream and the lost-sandbox poll, and waits for their threads.
  ~RemoteNode() override;

  std::string name() const override { return name_; }
  Result<node::SandboxRuntime> CreateSandbox(const node::NodeSandboxSpec& spec) override;
  Status DeleteSandbox(const std::string& id) override;
  Status AdoptSandbox(const std::string& id) override;
  int RunningExecs(const std::string& id) override;
  int ReapUnadopted(const std::set<std::string>& also_keep = {}) override;
  Status SetNetwork(const std::string& id, const net::Policy& policy) override;
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) override;
  Result<node::SnapshotLayer> Snapshot(const std::string& id,
                                       const node::SnapshotSpec& spec) override;
  Result<node::MemoryFork> PrepareFork(const std::string& id) override;
  Status EndFork(const std::string& token) override;
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string& under,
                                          size_t limit) override;
  Status PauseSandbox(const std::string& id) override;
  Status ResumeSandbox(const std::string& id) override;
  Result<node::density::SandboxDensity> Density(const std::string& id) override;
  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id,
                                                      const std::string& exec_id,
                                                      const node::ExecSpec& spec) override;
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id) override;
  Status SignalExec(const std::string& id, const std::string& exec_id, int sig) override;
  Result<std::vector<node::ExecSummary>> ExecHistory(const std::string& id) override;
  Status ResizeExec(const std::string& id, const std::string& exec_id,
                    node::TerminalSize size) override;
  Result<std::string> Screenshot(const std::string& id) override;
  Status DesktopInput(const std::string& id, const std::vector<agent::InputStep>& steps) override;
  Status WriteExecStdin(const std::string& id, const std::string& exec_id, std::string_view data,
                        bool eof) override;
  Status WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                   std::string_view data) override;
  Result<std::string> ReadFile(const std::string& id, const std::string& path,
                               uint64_t max) override;
  nlohmann::json Info() override;
  void SetOnSandboxLost(node::SandboxLostFn fn) override;
  Result<nlohmann::json> RunCall(const nlohmann::json& request, bool batch) override;

 private:
  // A request on a pooled keep-alive connection. An answer that is not 2xx becomes the node's
  // wire error (node::ParseWireStatus), context `what`.
  // `client`: a connection of the caller's own, else a pooled one.
  Result<client::Response> Call(const std::string& what, const std::string& method,
                                const std::string& target, std::string_view body = {},
                                const std::string& content_type = "application/json",
                                client::HttpClient* client = nullptr);
  Result<nlohmann::json> CallJson(const std::string& what, const std::string& method,
                                  const std::string& target, const nlohmann::json& body = nullptr);
  Status CallDone(const std::string& what, const std::string& method, const std::string& target,
                  const nlohmann::json& body = nullptr);
  std::unique_ptr<client::HttpClient> TakeClient();
  void GiveClient(std::unique_ptr<client::HttpClient> c);
  static std::string SandboxPath(const std::string& id);

  // The mirror of exec `exec_id` of sandbox `id`, fed from the node from now on.
  void StartFeeding(const std::string& key, const std::shared_ptr<node::ExecRecord>& rec);
  void Feed(std::shared_ptr<node::ExecRecord> rec, std::string target, client::HttpClient* client,
            std::atomic<int64_t>* last_line_ms);
  void Retire(const std::string& key, const std::shared_ptr<node::ExecRecord>& rec) REQUIRES(mu_);
  void PollLost();

  const std::string name_, url_, credential_;
  const RemoteNodeOptions opts_;

  Mutex pool_mu_;
  std::vector<std::unique_ptr<client::HttpClient>> idle_ GUARDED_BY(pool_mu_);

  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  // "sandbox/exec" -> the mirror (running, or finished and kept)
  std::map<std::string, std::shared_ptr<node::ExecRecord>> mirrors_ GUARDED_BY(mu_);
  // Finished mirrors, oldest first, with the output each holds (fixed once finished), and
  // their sum: retiring one costs O(1), not a walk over all that are kept.
  std::deque<std::pair<std::string, uint64_t>> finished_ GUARDED_BY(mu_);
  uint64_t finished_bytes_ GUARDED_BY(mu_) = 0;
  // The feeders' connections (for Abort at shutdown or when stalled), with when each last
  // received a line.
  struct Feeder {
    std::unique_ptr<client::HttpClient> client;
    std::shared_ptr<std::atomic<int64_t>> last_line_ms;  // steady clock
  };
  std::map<client::HttpClient*, Feeder> feeding_ GUARDED_BY(mu_);
  void AbortStalled() REQUIRES(mu_);
  node::SandboxLostFn on_lost_ GUARDED_BY(mu_);
  std::unique_ptr<client::HttpClient> poll_client_;  // the poller's; aborted at shutdown
  std::thread lost_poller_;
};

}  // namespace warren::cluster
