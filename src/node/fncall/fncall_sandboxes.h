// `backend: fncall` sandboxes: the same sandbox API as containers, stateless. A fncall sandbox
// is only a record and a runner image; each exec runs as one program in a fresh worker of a
// runner (own namespaces, uid, tmpfs, limits, seccomp, Landlock: see zygote.py), so nothing an
// exec does is seen by the next. Files, pause and signals have nothing to act on (409).
//
// FncallSandboxes is a service of the node (LocalNode owns it, beside the runner pool it runs
// execs on): the node hands it every operation on a sandbox it holds, so the server, its exec
// records, streams and trajectories see one NodeApi for every backend.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "node/fncall/call_pool.h"
#include "node/node_api.h"

namespace warren::fncall {

class FncallSandboxes {
 public:
  // `spill_dir`: where exec records are journaled (node/exec_spill.h), as for every sandbox, so
  // a restarted daemon gives back a fncall sandbox's finished execs too; empty: nowhere.
  FncallSandboxes(CallService* calls, std::string spill_dir)
      : calls_(calls), spill_dir_(std::move(spill_dir)) {}
  ~FncallSandboxes();  // waits for the execs running (each ends at its own limits)

  // Whether `id` is one of ours: the node asks before each operation on a sandbox.
  bool Has(const std::string& id);
  size_t size();
  // The ids held, whose exec journals a reap of leftovers keeps.
  void AddIds(std::set<std::string>* ids);

  Result<node::SandboxRuntime> Create(const node::NodeSandboxSpec& spec);
  Status Delete(const std::string& id);
  int RunningExecs(const std::string& id);
  Status SetNetwork(const std::string& id, const net::Policy& policy);
  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id,
                                                      const std::string& exec_id,
                                                      const node::ExecSpec& spec);
  Result<std::vector<node::ExecSummary>> ExecHistory(const std::string& id);
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id);
  // What a fncall sandbox cannot do (files, pause, signals, stdin): 409 saying why.
  static Status NoState(const std::string& op, const std::string& id);

 private:
  struct Box {
    std::vector<std::string> layers;
    runtime::SandboxConfig config;
    std::shared_ptr<node::OutputBudget> budget;
    node::ExecBook execs;
    std::shared_ptr<node::ExecJournal> journal;  // null without a spill dir
  };
  std::shared_ptr<Box> Find(const std::string& id);
  void Execute(std::shared_ptr<Box> box, std::shared_ptr<node::ExecRecord> rec, RunRequest req);
  void JoinFinished();

  CallService* calls_;
  const std::string spill_dir_;
  // Guards boxes_, workers_ and each Box's execs.
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Box>> boxes_ GUARDED_BY(mu_);
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_ GUARDED_BY(mu_);  // one per running exec
};

}  // namespace warren::fncall
