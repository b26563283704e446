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
  s.by_pid[pid] = Entry{std::move(config), std::move(tag), pty, rec};
  return pid;
}

std::optional<ProcessTable::Process> ProcessTable::Find(const std::string& sandbox, uint32_t pid,
                                                        const std::optional<std::string>& tag) {
  MutexLock lock(&mu_);
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return std::nullopt;
  Prune(&it->second);
  for (const auto& [p, e] : it->second.by_pid) {
    if (tag ? e.tag != tag : p != pid) continue;
    auto rec = e.rec.lock();
    if (!rec || rec->done()) return std::nullopt;
    return Process{p, e.config, e.tag, e.pty, std::move(rec)};
  }
  return std::nullopt;
}

std::vector<ProcessTable::Process> ProcessTable::Running(const std::string& sandbox) {
  MutexLock lock(&mu_);
  std::vector<Process> out;
  auto it = sandboxes_.find(sandbox);
  if (it == sandboxes_.end()) return out;
  Prune(&it->second);
  for (const auto& [pid, e] : it->second.by_pid)
    if (auto rec = e.rec.lock(); rec && !rec->done())
      out.push_back(Process{pid, e.config, e.tag, e.pty, std::move(rec)});
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
  std::erase_if(s->by_pid, [](const auto& kv) {
    auto rec = kv.second.rec.lock();
    return !rec || rec->done();
  });
}

}  // namespace warren::server::e2b
