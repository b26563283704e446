// SimulatedNode: a node that accepts sandboxes without making them, for measuring the cluster's
// control plane at the unit's scale on one machine (`warren node --simulate N`, bench/cluster.py).
// It keeps each sandbox's id and backend in memory and answers the node API as a node whose
// sandboxes all started at once; nothing runs, nothing is mounted, no root is needed. A
// command or a file operation is refused with a clear error rather than answered with made-up
// output: the simulation covers placement, reservations, records and the node calls of a
// create and a delete, not what happens inside a sandbox.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "node/node_api.h"

namespace warren::cluster {

class SimulatedNode : public node::NodeApi {
 public:
  SimulatedNode(std::string name, std::set<runtime::BackendKind> backends);

  std::string name() const override { return name_; }
  Result<node::SandboxRuntime> CreateSandbox(const node::NodeSandboxSpec& spec) override;
  Status DeleteSandbox(const std::string& id) override;
  Status AdoptSandbox(const std::string& id) override;
  int RunningExecs(const std::string&) override { return 0; }
  int ReapUnadopted(const std::set<std::string>&) override { return 0; }
  Status SetNetwork(const std::string& id, const net::Policy&) override;
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy&) override;
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string&,
                                          size_t) override;
  Status PauseSandbox(const std::string& id) override;
  Status ResumeSandbox(const std::string& id) override;
  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id, const std::string&,
                                                      const node::ExecSpec&) override;
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id) override;
  Status SignalExec(const std::string& id, const std::string& exec_id, int) override;
  Result<std::vector<node::ExecSummary>> ExecHistory(const std::string& id) override;
  Status ResizeExec(const std::string& id, const std::string& exec_id, node::TerminalSize) override;
  Result<std::string> Screenshot(const std::string& id) override;
  Status DesktopInput(const std::string& id, const std::vector<agent::InputStep>&) override;
  Status WriteExecStdin(const std::string& id, const std::string& exec_id, std::string_view,
                        bool) override;
  Status WriteFile(const std::string& id, const std::string& path, uint32_t,
                   std::string_view) override;
  Result<std::string> ReadFile(const std::string& id, const std::string& path, uint64_t) override;
  nlohmann::json Info() override;
  void SetOnSandboxLost(node::SandboxLostFn) override {}

  size_t size() const;
  std::vector<std::string> SandboxIds() const;
  // The layers of every sandbox it was given: a real node holds those after their first use,
  // and placement prefers nodes that hold a sandbox's layers.
  std::vector<std::string> Layers() const;

 private:
  // not_found for an unknown sandbox; otherwise the refusal of what a simulation cannot do.
  Status NothingRunsIn(const std::string& id, const char* op) const;
  Status Known(const std::string& id, const char* op) const;

  const std::string name_;
  const std::set<runtime::BackendKind> backends_;
  mutable Mutex mu_;
  std::set<std::string> sandboxes_ GUARDED_BY(mu_);
  std::set<std::string> paused_ GUARDED_BY(mu_);
  std::set<std::string> layers_ GUARDED_BY(mu_);
};

}  // namespace warren::cluster
