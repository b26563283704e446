#include "server/e2b/process_table.h"

#include "base/ids.h"

namespace warren::server::e2b {

uint32_t ProcessTable::Add(const std::string& sandbox, ProcessConfig config,
                           std::optional<std::string> tag, bool pty,
                           std::shared_ptr<node::ExecRecord> rec) {
  MutexLock lock(&mu_);
  if (++adds_ % 256 == 0) PruneAll();
  Sandbox& s = sandboxes_[sandbox];
  Prune(&s);
  s.last_add = NowSeconds();
  const uint32_t pid = s.next_pid++;
  s.by_pid[pid] = Process{pid, std::move(config), std::move(tag), pty, std::move(rec)};
  return pid;
}

std::optional<ProcessTable::Process> ProcessTable::Find(const std::string& sandbox, uint32_t pid,
                                                        const std::optional<std::string>& tag) {
  MutexLock lock(&mu_);
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return std::nullopt;
  Prune(&it->second);
  for (const auto& [p, proc] : it->second.by_pid)
    if (tag ? proc.tag == tag : p == pid) return proc;
  return std::nullopt;
}

std::vector<ProcessTable::Process> ProcessTable::Running(const std::string& sandbox) {
  MutexLock lock(&mu_);
  std::vector<Process> out;
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return out;
  Prune(&it->second);
  for (const auto& [pid, proc] : it->second.by_pid) out.push_back(proc);
  return out;
}

void ProcessTable::ForgetSandbox(const std::string& sandbox) {
  MutexLock lock(&mu_);
  sandboxes_.erase(sandbox);
}

void ProcessTable::PruneAll() {
  // Kept for a while once empty, so that a pid is not handed out again soon in a sandbox
  // that still runs.
  constexpr double kKeepEmptyS = 600;
  const double now = NowSeconds();
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    Prune(&it->second);
    if (it->second.by_pid.empty() && now - it->second.last_add > kKeepEmptyS)
      it = sandboxes_.erase(it);
    else
      ++it;
  }
}

void ProcessTable::Prune(Sandbox* s) {
  std::erase_if(s->by_pid, [](const auto& kv) { return kv.second.rec->done(); });
}

}  // namespace warren::server::e2b
