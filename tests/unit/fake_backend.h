// A runtime::Backend for unit tests of the node: each sandbox is a socketpair and a thread
// that speaks just enough of the agent protocol (exec of `echo WORDS...` and `exit N`), so
// LocalNode's bookkeeping, exec path and dispatch run without a kernel sandbox. Every
// operation is counted, and a create can be made to fail. Not for anything but tests: the
// real backends are runtime/container and runtime/vm.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/protocol.h"
#include "runtime/backend.h"

namespace warren::testing {

struct FakeBackendCounts {
  std::atomic<int> created{0}, destroyed{0}, paused{0}, resumed{0};
};

class FakeInstance : public runtime::Instance {
 public:
  FakeInstance(FakeBackendCounts* counts) : counts_(counts) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0) {
      node_end_.Reset(sv[0]);
      agent_end_.Reset(sv[1]);
      agent_ = std::thread([this] { Serve(); });
    }
  }
  ~FakeInstance() override { (void)Destroy(); }

  UniqueFd TakeControlSocket() override { return std::move(node_end_); }
  Status Destroy() override {
    std::call_once(destroyed_, [this] {
      ++counts_->destroyed;
      if (agent_end_) shutdown(agent_end_.get(), SHUT_RDWR);  // the agent ends: its thread too
      if (agent_.joinable()) agent_.join();
      agent_end_.Reset();
    });
    return Status::Ok();
  }
  Status Pause() override {
    ++counts_->paused;
    return Status::Ok();
  }
  Status Resume() override {
    ++counts_->resumed;
    return Status::Ok();
  }
  int host_pid() const override { return 4242; }
  uint32_t host_uid() const override { return 100000; }

  // The agent exits on its own (the sandbox's init died): the node must notice.
  void Crash() { shutdown(agent_end_.get(), SHUT_RDWR); }

 private:
  void Serve() {
    for (;;) {
      auto m = agent::Recv(agent_end_.get());
      if (!m.ok()) return;
      if (m->header.value("t", "") != "exec") continue;
      const std::string id = m->header.value("id", "");
      const auto argv = m->header.value("argv", std::vector<std::string>{});
      int code = 0;
      std::string out;
      if (!argv.empty() && argv[0] == "echo") {
        for (size_t i = 1; i < argv.size(); ++i) out += (i > 1 ? " " : "") + argv[i];
        out += "\n";
      } else if (argv.size() == 2 && argv[0] == "exit") {
        code = std::stoi(argv[1]);
      } else {
        code = 127;
      }
      if (!out.empty())
        (void)agent::Send(agent_end_.get(), {{{"t", "out"}, {"id", id}, {"s", "stdout"}}, out});
      (void)agent::Send(agent_end_.get(), {{{"t", "exit"}, {"id", id}, {"exit_code", code}}, ""});
    }
  }

  FakeBackendCounts* counts_;
  UniqueFd node_end_, agent_end_;
  std::thread agent_;
  std::once_flag destroyed_;
};

class FakeBackend : public runtime::Backend {
 public:
  explicit FakeBackend(FakeBackendCounts* counts) : counts_(counts) {}
  std::string name() const override { return "fake"; }
  Result<std::unique_ptr<runtime::Instance>> Create(const runtime::SandboxConfig& cfg) override {
    std::lock_guard lock(mu_);
    if (fail_next_) {
      fail_next_ = false;
      return Status(Code::kInternal, "create sandbox", cfg.id, "the fake backend was told to fail");
    }
    ++counts_->created;
    auto inst = std::make_unique<FakeInstance>(counts_);
    instances_[cfg.id] = inst.get();
    return std::unique_ptr<runtime::Instance>(std::move(inst));
  }
  void FailNextCreate() {
    std::lock_guard lock(mu_);
    fail_next_ = true;
  }
  // The instance made for `id` (owned by the node; valid until it is deleted).
  FakeInstance* instance(const std::string& id) {
    std::lock_guard lock(mu_);
    return instances_.count(id) ? instances_[id] : nullptr;
  }

 private:
  FakeBackendCounts* counts_;
  std::mutex mu_;
  bool fail_next_ = false;
  std::map<std::string, FakeInstance*> instances_;
};

}  // namespace warren::testing
