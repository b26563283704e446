// A NodeApi for unit tests of the API server: sandboxes are entries in a map, each with a tiny
// file system of its own, and execs run at once against it. Every operation can be made to
// fail (fail_next), and every call is counted, so tests see what the server asked of the
// node. Not for anything but tests: the real node is LocalNode.
//
// Commands a fake exec understands (argv):
//   append PATH TEXT    appends TEXT to PATH, prints the file
//   cat PATH            prints PATH (exit 1 if it does not exist)
//   hostname            prints the sandbox id (differs between sandboxes)
//   exit N              exits with N
//   hold                keeps running: the test feeds and ends its record (GetExec)
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "node/exec_record.h"
#include "node/node_api.h"

namespace warren::testing {

class FakeNode : public node::NodeApi {
 public:
  struct Sandbox {
    node::NodeSandboxSpec spec;
    bool paused = false;
    std::map<std::string, std::string> files;
    std::map<std::string, std::shared_ptr<node::ExecRecord>> execs;
  };

  std::string name() const override { return "fake"; }

  Result<node::SandboxRuntime> CreateSandbox(const node::NodeSandboxSpec& spec) override {
    if (during_create) during_create(spec.config.id);  // what happens while it is made
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("create"));
    if (sandboxes.count(spec.config.id))
      return Status(Code::kConflict, "create sandbox", spec.config.id, "exists");
    sandboxes[spec.config.id].spec = spec;
    return node::SandboxRuntime{1000 + static_cast<int>(sandboxes.size()), 100000};
  }
  Status DeleteSandbox(const std::string& id) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("delete"));
    if (!sandboxes.erase(id)) return NotFound("sandbox", id);
    deleted.insert(id);
    return Status::Ok();
  }
  Status AdoptSandbox(const std::string& id) override {
    std::lock_guard lock(mu);
    return sandboxes.count(id) ? Status::Ok() : NotFound("sandbox", id);
  }
  int RunningExecs(const std::string&) override { return 0; }
  int ReapUnadopted(const std::set<std::string>& = {}) override { return 0; }
  Status SetNetwork(const std::string& id, const net::Policy&) override {
    return Op("network", id);
  }
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy&) override {
    return Op("filesystem", id);
  }
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string&,
                                          size_t) override {
    WARREN_RETURN_IF_ERROR(Op("changes", id));
    return isolation::ChangeReport{};
  }
  // A snapshot's digest names the sandbox and how many were taken of it.
  Result<node::SnapshotLayer> Snapshot(const std::string& id,
                                       const node::SnapshotSpec& spec) override {
    WARREN_RETURN_IF_ERROR(Op("snapshot", id));
    std::lock_guard lock(mu);
    snapshots.push_back({id, spec});
    std::string hex = std::to_string(snapshots.size());
    hex = std::string(64 - hex.size(), '0') + hex;
    return node::SnapshotLayer{"sha256:" + hex, 4096, 3, 100, 1};
  }
  std::vector<std::pair<std::string, node::SnapshotSpec>> snapshots;
  // Memory forks (a microVM node's): off, PrepareFork is unavailable and forks take files.
  bool memory_forks = false;
  Result<node::MemoryFork> PrepareFork(const std::string& id) override {
    if (!memory_forks) return NodeApi::PrepareFork(id);
    WARREN_RETURN_IF_ERROR(Op("fork", id));
    std::lock_guard lock(mu);
    prepared_forks.push_back(id);
    return node::MemoryFork{ForkToken(prepared_forks.size()), 1 << 20, 5, 10};
  }
  Status EndFork(const std::string& token) override {
    std::lock_guard lock(mu);
    ended_forks.push_back(token);
    return Status::Ok();
  }
  std::vector<std::string> prepared_forks, ended_forks;
  // The token of the n-th fork (1-based): 32 hex digits, as a node's.
  static std::string ForkToken(size_t n) {
    const std::string d = std::to_string(n);
    return std::string(32 - d.size(), '0') + d;
  }
  // A paused sandbox stands as hibernated, one that was never paused as active.
  Result<node::density::SandboxDensity> Density(const std::string& id) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("density"));
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    node::density::SandboxDensity d;
    d.activity =
        it->second.paused ? node::density::Activity::kHibernated : node::density::Activity::kActive;
    d.memory.resident_bytes = 1 << 20;
    d.memory.swapped_bytes = 40 << 20;
    d.wakes = 2;
    d.max_wake_ms = 12.5;
    return d;
  }
  Status PauseSandbox(const std::string& id) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("pause"));
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    it->second.paused = true;
    return Status::Ok();
  }
  Status ResumeSandbox(const std::string& id) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("resume"));
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    it->second.paused = false;
    return Status::Ok();
  }

  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id,
                                                      const std::string& exec_id,
                                                      const node::ExecSpec& spec) override {
    std::shared_ptr<node::ExecRecord> rec;
    std::string out;
    int code = 0;
    {
      std::lock_guard lock(mu);
      WARREN_RETURN_IF_ERROR(Fail("exec"));
      auto it = sandboxes.find(id);
      if (it == sandboxes.end()) return NotFound("sandbox", id);
      ++execs_run;
      Sandbox& sb = it->second;
      const auto& a = spec.argv;
      if (a.size() == 3 && a[0] == "append") {
        sb.files[a[1]] += a[2];
        out = sb.files[a[1]];
      } else if (a.size() == 2 && a[0] == "cat") {
        if (auto f = sb.files.find(a[1]); f != sb.files.end())
          out = f->second;
        else
          code = 1;
      } else if (a.size() == 1 && a[0] == "hostname") {
        out = id + "\n";
      } else if (a.size() == 2 && a[0] == "exit") {
        code = std::stoi(a[1]);
      } else if (a.size() == 1 && a[0] == "hold") {
        rec = std::make_shared<node::ExecRecord>(exec_id, id, spec.max_output, spec.binary);
        sb.execs[exec_id] = rec;
      } else {
        code = 127;
      }
      if (!rec) {
        rec = std::make_shared<node::ExecRecord>(exec_id, id, spec.max_output, spec.binary);
        sb.execs[exec_id] = rec;
      }
      rec->SetCommand(a);
      if (a.size() == 1 && a[0] == "hold") {
        if (spec.on_record) spec.on_record(rec);
        return rec;  // held
      }
    }
    if (spec.on_record) spec.on_record(rec);
    rec->AppendOutput(1, out);
    node::ExecOutcome o;
    o.exit_code = code;
    rec->Finish(o);
    return rec;
  }
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id) override {
    std::lock_guard lock(mu);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    auto e = it->second.execs.find(exec_id);
    if (e == it->second.execs.end()) return NotFound("exec", exec_id);
    return e->second;
  }
  Status SignalExec(const std::string& id, const std::string&, int) override {
    return Op("signal", id);
  }
  Result<std::vector<node::ExecSummary>> ExecHistory(const std::string& id) override {
    std::lock_guard lock(mu);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    std::vector<node::ExecSummary> out;
    for (const auto& [eid, rec] : it->second.execs) out.push_back(rec->Summary());
    return out;
  }
  Status WriteExecStdin(const std::string& id, const std::string&, std::string_view,
                        bool) override {
    return Op("stdin", id);
  }
  Status ResizeExec(const std::string& id, const std::string&, node::TerminalSize) override {
    return Op("resize", id);
  }
  Result<std::string> Screenshot(const std::string& id) override {
    WARREN_RETURN_IF_ERROR(Op("screen", id));
    return std::string("\x89PNG");
  }
  Status DesktopInput(const std::string& id, const std::vector<agent::InputStep>&) override {
    return Op("input", id);
  }
  Status WriteFile(const std::string& id, const std::string& path, uint32_t,
                   std::string_view data) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("write"));
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    it->second.files[path] = std::string(data);
    return Status::Ok();
  }
  Result<std::string> ReadFile(const std::string& id, const std::string& path, uint64_t) override {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail("read"));
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return NotFound("sandbox", id);
    auto f = it->second.files.find(path);
    if (f == it->second.files.end()) return NotFound("file", path);
    return f->second;
  }
  nlohmann::json Info() override {
    std::lock_guard lock(mu);
    ++info_calls;
    return {{"name", "fake"}, {"sandboxes", sandboxes.size()}};
  }
  void SetOnSandboxLost(node::SandboxLostFn fn) override { on_lost = std::move(fn); }

  // Test controls.
  void Lose(const std::string& id) {
    {
      std::lock_guard lock(mu);
      sandboxes.erase(id);
    }
    if (on_lost) on_lost(id, "");
  }
  std::string File(const std::string& id, const std::string& path) {
    std::lock_guard lock(mu);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return "<no sandbox>";
    auto f = it->second.files.find(path);
    return f == it->second.files.end() ? "<no file>" : f->second;
  }

  std::mutex mu;
  std::map<std::string, Sandbox> sandboxes;
  std::set<std::string> deleted;
  std::map<std::string, Status> fail_next;  // operation -> the status its next call returns
  int execs_run = 0;
  int info_calls = 0;
  node::SandboxLostFn on_lost;
  // Runs at the start of each create, before the fake decides (tests: a node lost mid-create).
  std::function<void(const std::string& id)> during_create;

 private:
  Status Fail(const std::string& op) {
    auto it = fail_next.find(op);
    if (it == fail_next.end()) return Status::Ok();
    Status st = it->second;
    fail_next.erase(it);
    return st;
  }
  Status Op(const std::string& op, const std::string& id) {
    std::lock_guard lock(mu);
    WARREN_RETURN_IF_ERROR(Fail(op));
    return sandboxes.count(id) ? Status::Ok() : NotFound("sandbox", id);
  }
};

// A NodeApi that hands every call to another one: a fleet owns its connections, the test owns
// the fake nodes behind them.
class ForwardingNode : public node::NodeApi {
 public:
  explicit ForwardingNode(node::NodeApi* to) : to_(to) {}
  std::string name() const override { return to_->name(); }
  Result<node::SandboxRuntime> CreateSandbox(const node::NodeSandboxSpec& s) override {
    return to_->CreateSandbox(s);
  }
  Status DeleteSandbox(const std::string& id) override { return to_->DeleteSandbox(id); }
  Status AdoptSandbox(const std::string& id) override { return to_->AdoptSandbox(id); }
  int RunningExecs(const std::string& id) override { return to_->RunningExecs(id); }
  int ReapUnadopted(const std::set<std::string>& keep = {}) override {
    return to_->ReapUnadopted(keep);
  }
  Status SetNetwork(const std::string& id, const net::Policy& p) override {
    return to_->SetNetwork(id, p);
  }
  Status SetFilesystem(const std::string& id, const isolation::FsPolicy& p) override {
    return to_->SetFilesystem(id, p);
  }
  Result<isolation::ChangeReport> Changes(const std::string& id, const std::string& under,
                                          size_t limit) override {
    return to_->Changes(id, under, limit);
  }
  Result<node::density::SandboxDensity> Density(const std::string& id) override {
    return to_->Density(id);
  }
  Result<node::SnapshotLayer> Snapshot(const std::string& id,
                                       const node::SnapshotSpec& spec) override {
    return to_->Snapshot(id, spec);
  }
  Result<node::MemoryFork> PrepareFork(const std::string& id) override {
    return to_->PrepareFork(id);
  }
  Status EndFork(const std::string& token) override { return to_->EndFork(token); }
  Status PauseSandbox(const std::string& id) override { return to_->PauseSandbox(id); }
  Status ResumeSandbox(const std::string& id) override { return to_->ResumeSandbox(id); }
  Result<std::shared_ptr<node::ExecRecord>> StartExec(const std::string& id,
                                                      const std::string& exec_id,
                                                      const node::ExecSpec& spec) override {
    return to_->StartExec(id, exec_id, spec);
  }
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const std::string& id,
                                                    const std::string& exec_id) override {
    return to_->GetExec(id, exec_id);
  }
  Status SignalExec(const std::string& id, const std::string& exec_id, int sig) override {
    return to_->SignalExec(id, exec_id, sig);
  }
  Result<std::vector<node::ExecSummary>> ExecHistory(const std::string& id) override {
    return to_->ExecHistory(id);
  }
  Status WriteExecStdin(const std::string& id, const std::string& exec_id, std::string_view data,
                        bool eof) override {
    return to_->WriteExecStdin(id, exec_id, data, eof);
  }
  Status ResizeExec(const std::string& id, const std::string& exec_id,
                    node::TerminalSize size) override {
    return to_->ResizeExec(id, exec_id, size);
  }
  Result<std::string> Screenshot(const std::string& id) override { return to_->Screenshot(id); }
  Status DesktopInput(const std::string& id, const std::vector<agent::InputStep>& steps) override {
    return to_->DesktopInput(id, steps);
  }
  Status WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                   std::string_view data) override {
    return to_->WriteFile(id, path, mode, data);
  }
  Result<std::string> ReadFile(const std::string& id, const std::string& path,
                               uint64_t max) override {
    return to_->ReadFile(id, path, max);
  }
  nlohmann::json Info() override { return to_->Info(); }
  void SetOnSandboxLost(node::SandboxLostFn fn) override { to_->SetOnSandboxLost(std::move(fn)); }

 private:
  node::NodeApi* const to_;
};

}  // namespace warren::testing
