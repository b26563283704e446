#include "node/memory_forks.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "base/ids.h"

namespace warren::node {

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string MemoryForks::Add(std::shared_ptr<const runtime::vm::MemoryImage> image,
                             std::vector<ExecSpill::Loaded> execs, const std::string& parent) {
  auto fork = std::make_shared<Fork>();
  fork->image = std::move(image);
  for (auto& e : execs) fork->execs.push_back({std::move(e.meta), std::move(e.frames)});
  fork->parent = parent;
  fork->made_ms = SteadyMs();
  std::string token = RandomHex(16);
  std::lock_guard lock(mu_);
  DropAbandonedLocked(fork->made_ms);
  forks_[token] = std::move(fork);
  return token;
}

Result<std::shared_ptr<const MemoryForks::Fork>> MemoryForks::Find(const std::string& token) {
  std::lock_guard lock(mu_);
  auto it = forks_.find(token);
  if (it == forks_.end())
    return Status(Code::kNotFound, "create a fork's child", "fork", "the fork has ended");
  return it->second;
}

void MemoryForks::End(const std::string& token) {
  std::lock_guard lock(mu_);
  forks_.erase(token);
}

void MemoryForks::Clear() {
  std::lock_guard lock(mu_);
  forks_.clear();
}

size_t MemoryForks::size() const {
  std::lock_guard lock(mu_);
  return forks_.size();
}

void MemoryForks::DropAbandonedLocked(int64_t now_ms) {
  for (auto it = forks_.begin(); it != forks_.end();) {
    if (now_ms - it->second->made_ms > kAbandonedMs) {
      spdlog::warn("memory fork of {}: never ended; its capture goes", it->second->parent);
      it = forks_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace warren::node
