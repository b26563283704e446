// The node's side of one sandbox's agent connection: sends requests, and (fed by the
// AgentMux thread) routes replies to exec records and waiting file operations.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/display.h"
#include "agent/protocol.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "isolation/fs_policy.h"
#include "isolation/overlay_changes.h"
#include "node/exec_record.h"
#include "node/terminal_size.h"

namespace warren::node {

using agent::DisplaySize;
using agent::InputStep;

struct ExecSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  // Set only where neither the sandbox's environment nor `env` sets them.
  std::map<std::string, std::string> env_defaults;
  std::string cwd = "/";
  std::string stdin_data;
  bool has_stdin = false;
  int64_t timeout_ms = 0;
  uint64_t max_output = 1 << 20;
  bool binary = false;
  // A terminal for the command: its stdin, stdout and stderr are the one end of a
  // pseudo-terminal of the sandbox's own devpts, of this size, resizable while it runs; its
  // output is the terminal's bytes, all on stdout. Implies `stdin_open`.
  std::optional<TerminalSize> tty;
  // Input keeps coming while the command runs (NodeApi::WriteExecStdin); without it stdin
  // ends after `stdin_data`.
  bool stdin_open = false;
  // Called with the new record before the command starts (e.g. to set its finisher).
  std::function<void(const std::shared_ptr<ExecRecord>&)> on_record;
  // A node-internal channel command (see agent/exec_child.h, keep_caps): its output goes to
  // `on_output` (stream 1 or 2, on the mux thread) instead of the record, with no cap, and
  // its stdin stays open for SendStdin.
  bool channel = false;
  std::function<void(int stream, std::string_view data)> on_output;
};

class AgentConn {
 public:
  AgentConn(std::string sandbox_id, UniqueFd sock);
  ~AgentConn();

  int fd() const { return sock_.get(); }
  const std::string& sandbox_id() const { return sandbox_id_; }

  // Called by the mux thread only.
  void OnMessage(agent::Message& m);
  void OnClosed(const std::string& why);

  Status StartExec(const std::shared_ptr<ExecRecord>& rec, const ExecSpec& spec);
  // After a daemon restart: takes the records rebuilt from their spill files, then asks the
  // agent to resume (it resends what came after what we hold, and the exits we missed).
  void AdoptExecs(std::vector<std::shared_ptr<ExecRecord>> recs);
  // Copies of the records of the commands running now (not channels, whose output goes to
  // their caller): a memory fork's children adopt them.
  std::vector<ExecSpill::Loaded> CopyRunningExecs();
  // A microVM's guest clock stood still (its QEMU was stopped, for a fork's capture): the
  // agent sets it to the node's realtime clock now. Nothing answers.
  Status SetGuestClock();
  Status Resume();
  Status Signal(const std::string& exec_id, int sig);
  // More stdin for a command started with stdin_open, tty or as a channel. The caller checks
  // that it takes input (LocalNode::WriteExecStdin).
  Status SendStdin(const std::string& exec_id, std::string_view data, bool eof);
  // A new size for a tty command's terminal; the kernel tells its foreground process group
  // (SIGWINCH).
  Status Resize(const std::string& exec_id, TerminalSize size);
  // A desktop sandbox's screen, through its agent (agent/desktop.h): started once at create,
  // captured as PNG, given input steps.
  // `device`: the machine has a display device (backend vm): the agent starts an X server
  // on it (Xorg) instead of a virtual one (Xvfb); screenshots and input are then QEMU's.
  Status StartDisplay(DisplaySize size, bool device = false);
  Result<std::string> Screenshot();
  Status DesktopInput(const std::vector<InputStep>& steps);
  std::shared_ptr<ExecRecord> FindExec(const std::string& exec_id);
  // The commands it keeps (running and the last finished ones), in start order.
  std::vector<ExecSummary> ExecHistory() const;
  int Running() const;
  // Whether someone waits on one of its running commands (ExecRecord::awaited).
  bool AnyExecAwaited() const;
  // Blocking file operations through the agent (inside the sandbox's own mount namespace
  // and credentials: the host never resolves a sandbox-controlled path).
  Status WriteFile(const std::string& path, uint32_t mode, std::string_view data);
  Result<std::string> ReadFile(const std::string& path, uint64_t max);
  // A microVM's filesystem policy and tamper report, done by its agent (agent/fs_helper.h).
  Status SetFsPolicy(const isolation::FsPolicy& policy);
  Result<isolation::ChangeReport> ReadChanges(const std::string& under, size_t limit);
  // A microVM's snapshot (agent fs_snapshot): its writable layer as a pax tar, each piece
  // handed to `sink` as it arrives (a sink error ends the copy and is the answer). There is
  // no deadline for the whole copy, only between two pieces.
  Status StreamSnapshot(const std::function<Status(std::string_view)>& sink);
  bool closed() const;

 private:
  struct PendingOp {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::string data;
    // When set, data goes here instead of into `data`; its first error is kept.
    std::function<Status(std::string_view)> sink;
    Status sink_status;
    std::chrono::steady_clock::time_point last_piece = std::chrono::steady_clock::now();
  };
  Status Send(const agent::Message& m);
  // Sends `header` (given an op id) and waits for the agent's ok, data... or err; the data.
  Result<std::string> Request(nlohmann::json header, std::string payload = "");
  // A client's input (an exec with stdin_open or tty), each piece acknowledged by the agent.
  Status WriteInput(const std::string& exec_id, std::string_view data, bool eof);
  std::shared_ptr<PendingOp> NewOp(std::string* id);
  Status WaitOp(const std::string& id, const std::shared_ptr<PendingOp>& op);
  static bool OpDone(PendingOp& op);

  const std::string sandbox_id_;
  UniqueFd sock_;
  std::mutex send_mu_;
  std::mutex stdin_mu_;  // keeps the pieces of one SendStdin together
  mutable Mutex mu_;
  bool closed_ GUARDED_BY(mu_) = false;
  std::string close_reason_ GUARDED_BY(mu_);
  uint64_t next_op_ GUARDED_BY(mu_) = 1;
  ExecBook execs_ GUARDED_BY(mu_);
  std::set<std::string> resume_asked_ GUARDED_BY(mu_);  // running execs named in our last `resume`
  std::map<std::string, std::shared_ptr<PendingOp>> ops_ GUARDED_BY(mu_);
  std::map<std::string, std::function<void(int, std::string_view)>> channels_ GUARDED_BY(mu_);
  std::shared_ptr<OutputBudget> budget_;

 public:
  const std::shared_ptr<OutputBudget>& budget() const { return budget_; }
};

}  // namespace warren::node
