// `backend: fncall` sandboxes: the same sandbox API as containers, stateless. A fncall sandbox
// is only a record and a runner image; each exec runs as one program in a fresh worker of a
// runner (own namespaces, uid, tmpfs, limits, seccomp, Landlock: see zygote.py), so nothing an
// exec does is seen by the next. Files, pause and signals have nothing to act on (409).
//
// FncallNode wraps the real node: it answers for fncall sandboxes and passes everything else
// through, so the server, its exec records, streams and trajectories work unchanged.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node/node_api.h"
#include "runtime/fncall/call_pool.h"

namespace warren::fncall {

class FncallNode : public node::NodeApi {
 public:
  // `spill_dir`: where exec records are journaled (node/exec_spill.h), as for every sandbox, so
  // a restarted daemon gives back a fncall sandbox's finished execs too; empty: nowhere.
  FncallNode(node::NodeApi* inner, CallService* calls, std::string spill_dir = "")
      : inner_(inner), calls_(calls), spill_dir_(std::move(spill_dir)) {}
  ~FncallNode() override;

  std::string name() const override { return inner_->name(); }
  Result<node::SandboxRuntime> CreateSandbox(const node::NodeSandboxSpec& spec) override;
  Status DeleteSandbox(const std::string& id) override;
  Status AdoptSandbox(const std::string& id) override { return inner_->AdoptSandbox(id); }
  int RunningExecs(const std::string& id) override;
  int ReapUnadopted(const std::set<std::string>& also_keep = {}) override;
  Status SetNetwork(const std::string& id, const net::Policy& policy) override;
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) override;
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string& under,
                                          size_t limit) override;
  Status PauseSandbox(const std::string& id) override;
  Status ResumeSandbox(const std::string& id) override;
  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id,
                                                      const std::string& exec_id,
                                                      const node::ExecSpec& spec) override;
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id) override;
  Status SignalExec(const std::string& id, const std::string& exec_id, int sig) override;
  Status WriteExecStdin(const std::string& id, const std::string& exec_id, std::string_view data,
                        bool eof) override;
  Status WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                   std::string_view data) override;
  Result<std::string> ReadFile(const std::string& id, const std::string& path,
                               uint64_t max) override;
  nlohmann::json Info() override;
  void SetOnSandboxLost(std::function<void(const std::string& id)> fn) override {
    inner_->SetOnSandboxLost(std::move(fn));
  }

 private:
  struct Box {
    std::vector<std::string> layers;
    runtime::SandboxConfig config;
    std::shared_ptr<node::OutputBudget> budget;
    node::ExecMap execs;
    std::vector<std::string> order;              // for forgetting the oldest finished execs
    std::shared_ptr<node::ExecJournal> journal;  // null without a spill dir
  };
  std::shared_ptr<Box> Find(const std::string& id);
  void Execute(std::shared_ptr<Box> box, std::shared_ptr<node::ExecRecord> rec, RunRequest req);
  void JoinFinished();

  node::NodeApi* inner_;
  CallService* calls_;
  const std::string spill_dir_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Box>> boxes_;
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;  // one per running exec
};

}  // namespace warren::fncall
