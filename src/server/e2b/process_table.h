// E2B's process ids for Warren's execs. envd names a process by its pid (or a tag); Warren by
// an exec id. Each sandbox gets its own small numbers, handed out in order, for the execs
// started through the E2B API; a process leaves its sandbox's table once it ended (envd's
// rule: Connect, SendInput and SendSignal to it answer not_found) and the whole table goes
// with the sandbox.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "node/exec_record.h"
#include "server/e2b/envd_messages.h"

namespace warren::server::e2b {

class ProcessTable {
 public:
  struct Process {
    uint32_t pid = 0;
    ProcessConfig config;
    std::optional<std::string> tag;
    bool pty = false;
    std::shared_ptr<node::ExecRecord> rec;  // in what Find and Running answer: held
  };
  // Records a started exec of sandbox `sandbox`: its pid.
  uint32_t Add(const std::string& sandbox, ProcessConfig config, std::optional<std::string> tag,
               bool pty, std::shared_ptr<node::ExecRecord> rec);
  // A running process by selector; nullopt when unknown or ended.
  std::optional<Process> Find(const std::string& sandbox, uint32_t pid,
                              const std::optional<std::string>& tag);
  // The running processes, by pid.
  std::vector<Process> Running(const std::string& sandbox);
  void ForgetSandbox(const std::string& sandbox);

 private:
  // The table holds a record weakly: its node keeps it while the command runs, and its output
  // is the node's to let go of (a deleted sandbox's, at once).
  struct Entry {
    ProcessConfig config;
    std::optional<std::string> tag;
    bool pty = false;
    std::weak_ptr<node::ExecRecord> rec;
  };
  struct Sandbox {
    uint32_t next_pid = 1000;  // as a small system's first user processes would be
    std::map<uint32_t, Entry> by_pid;
    double last_add = 0;  // monotonic seconds
  };
  // Drops the processes that ended.
  static void Prune(Sandbox* s);
  // Now and then: every sandbox's ended processes, and the sandboxes with none left that
  // started nothing for a while (deleted by the contract's API or their TTL: the E2B layer
  // hears of that only through its own kill). Their records hold output.
  void PruneAll() REQUIRES(mu_);
  uint64_t adds_ GUARDED_BY(mu_) = 0;
  Mutex mu_;
  std::map<std::string, Sandbox> sandboxes_ GUARDED_BY(mu_);
};

}  // namespace warren::server::e2b
