#include "cluster/idle_refresher.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <vector>

#include "cluster/idle_index.h"

namespace warren::cluster {

IdleRefresher::IdleRefresher(KvStore* kv, std::function<int64_t()> now_ms)
    : kv_(kv), now_ms_(std::move(now_ms)) {}

IdleRefresher::~IdleRefresher() { Stop(); }

void IdleRefresher::Touch(const std::string& id, double timeout_s) {
  if (timeout_s <= 0) return;
  const int64_t timeout_ms = std::llround(timeout_s * 1000), now = now_ms_();
  MutexLock lock(&mu_);
  int64_t& last = written_[id];
  if (last != 0 && now - last < IdleSlackMs(timeout_ms)) return;
  last = now;
  pending_[id] = {IdleDeadlineMs(now, timeout_ms), timeout_ms};
}

Status IdleRefresher::Write(const std::vector<std::pair<std::string, Pending>>& batch) {
  Txn txn;
  for (const auto& [id, p] : batch) {
    Txn one = IdleMoveTxn(id, p.deadline_ms, p.timeout_ms);
    txn.compare.insert(txn.compare.end(), one.compare.begin(), one.compare.end());
    txn.success.insert(txn.success.end(), one.success.begin(), one.success.end());
  }
  auto r = kv_->Commit(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded || batch.size() == 1) return Status::Ok();  // one alone: its sandbox went
  // Some sandbox went (or another replica wrote a later deadline): each on its own.
  Status last;
  for (const auto& one : batch)
    if (Status st = Write({one}); !st.ok()) last = st;
  return last;
}

int IdleRefresher::Flush() {
  std::map<std::string, Pending> due;
  {
    MutexLock lock(&mu_);
    due.swap(pending_);
    // Forget, every half minute, what is older than the longest slack: its next use writes
    // again anyway.
    const int64_t now = now_ms_();
    if (now - pruned_ms_ >= 30'000) {
      pruned_ms_ = now;
      for (auto it = written_.begin(); it != written_.end();)
        it = it->second < now - 2 * 60'000 ? written_.erase(it) : std::next(it);
    }
  }
  int written = 0;
  std::vector<std::pair<std::string, Pending>> batch;
  auto send = [&] {
    if (batch.empty()) return;
    if (Status st = Write(batch); !st.ok()) {
      spdlog::warn("write sandbox use to etcd: {}; tried again", st.ToString());
      MutexLock lock(&mu_);
      for (auto& [id, p] : batch) {
        Pending& again = pending_[id];
        if (again.deadline_ms < p.deadline_ms) again = p;
      }
    } else {
      written += static_cast<int>(batch.size());
    }
    batch.clear();
  };
  for (auto& item : due) {
    batch.push_back(std::move(item));
    if (batch.size() == kPerTxn) send();
  }
  send();
  return written;
}

void IdleRefresher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void IdleRefresher::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    lock.WaitFor(cv_, std::chrono::milliseconds(250));
    if (stop_) break;
    lock.Unlock();
    Flush();
    lock.Lock();
  }
  lock.Unlock();
  Flush();
}

void IdleRefresher::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace warren::cluster
