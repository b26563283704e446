// LocalNode over a fake container backend (fake_backend.h): the node's own bookkeeping, its
// exec path over the agent protocol, backend selection, the fncall service's dispatch and what
// happens when a sandbox's agent dies, without a kernel sandbox. The real backend's side is
// the integration tier's (tests/integration/container_test.cc).
#include "node/local_node.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "base/ids.h"
#include "fake_backend.h"

namespace warren::node {
namespace {

class LocalNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalNodeOptions opts;
    opts.cgroup_parent = "warren-unit-" + std::to_string(getpid());
    opts.network = false;
    opts.microvm = false;
    opts.warm_pool = 0;
    opts.container_backend = [this]() -> Result<std::unique_ptr<runtime::Backend>> {
      auto b = std::make_unique<testing::FakeBackend>(&counts_);
      backend_ = b.get();
      return std::unique_ptr<runtime::Backend>(std::move(b));
    };
    auto n = LocalNode::Start(opts, nullptr);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(*n);
  }

  static NodeSandboxSpec Spec(const std::string& id,
                              runtime::BackendKind kind = runtime::BackendKind::kContainer) {
    NodeSandboxSpec s;
    s.backend = kind;
    s.config.id = id;
    s.config.hostname = id;
    return s;
  }

  std::shared_ptr<ExecRecord> Run(const std::string& id, std::vector<std::string> argv) {
    ExecSpec es;
    es.argv = std::move(argv);
    auto rec = node_->StartExec(id, NewExecId(), es);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (!rec.ok()) return nullptr;
    EXPECT_TRUE((*rec)->WaitDone(10000));
    return *rec;
  }

  testing::FakeBackendCounts counts_;
  testing::FakeBackend* backend_ = nullptr;
  std::unique_ptr<LocalNode> node_;
};

TEST_F(LocalNodeTest, ASandboxRunsCommandsThroughItsAgentUntilDeleted) {
  ASSERT_TRUE(node_->CreateSandbox(Spec("sb-1")).ok());
  EXPECT_EQ(node_->live_sandboxes(), 1u);
  EXPECT_EQ(node_->Info()["sandboxes"], 1);
  auto rec = Run("sb-1", {"echo", "hello", "node"});
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->RawOutput(1), "hello node\n");
  EXPECT_EQ(rec->ResultJson()["exit_code"], 0);
  EXPECT_EQ(Run("sb-1", {"exit", "3"})->ResultJson()["exit_code"], 3);
  // The node keeps the records: GET finds them by id.
  auto again = node_->GetExec("sb-1", rec->id());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), rec.get());

  ASSERT_TRUE(node_->PauseSandbox("sb-1").ok());
  ASSERT_TRUE(node_->ResumeSandbox("sb-1").ok());
  EXPECT_EQ(counts_.paused, 1);
  EXPECT_EQ(counts_.resumed, 1);

  ASSERT_TRUE(node_->DeleteSandbox("sb-1").ok());
  EXPECT_EQ(counts_.destroyed, 1);
  EXPECT_EQ(node_->live_sandboxes(), 0u);
  EXPECT_EQ(node_->StartExec("sb-1", NewExecId(), {}).status().code(), Code::kNotFound);
  EXPECT_EQ(node_->DeleteSandbox("sb-1").code(), Code::kNotFound);
}

TEST_F(LocalNodeTest, AFailedCreateLeavesNothingAndTheIdIsFreeAgain) {
  backend_->FailNextCreate();
  auto r = node_->CreateSandbox(Spec("sb-2"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_EQ(node_->live_sandboxes(), 0u);
  ASSERT_TRUE(node_->CreateSandbox(Spec("sb-2")).ok());
  // The same id twice: refused before the backend is asked.
  EXPECT_EQ(node_->CreateSandbox(Spec("sb-2")).status().code(), Code::kConflict);
  EXPECT_EQ(counts_.created, 1);
}

TEST_F(LocalNodeTest, AKindWithoutItsBackendHereIsRefusedWithTheReason) {
  auto vm = node_->CreateSandbox(Spec("sb-vm", runtime::BackendKind::kMicrovm));
  EXPECT_EQ(vm.status().code(), Code::kUnavailable);
  EXPECT_NE(vm.status().ToString().find("disabled"), std::string::npos) << vm.status().ToString();
  auto fn = node_->CreateSandbox(Spec("sb-fn", runtime::BackendKind::kFncall));
  EXPECT_EQ(fn.status().code(), Code::kUnavailable);  // the fncall service is not started
  EXPECT_EQ(counts_.created, 0);
  EXPECT_EQ(node_->Info()["backends"], nlohmann::json::array({"container"}));
}

TEST_F(LocalNodeTest, AnAgentThatDiesIsReportedLostOnce) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lost;
  node_->SetOnSandboxLost([&](const std::string& id, const std::string&) {
    std::lock_guard lock(mu);
    lost.push_back(id);
    cv.notify_all();
  });
  ASSERT_TRUE(node_->CreateSandbox(Spec("sb-3")).ok());
  backend_->instance("sb-3")->Crash();
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !lost.empty(); }));
  EXPECT_EQ(lost, std::vector<std::string>{"sb-3"});
  lock.unlock();
  // Its record stays until the API deletes it; a command there is refused, not hung.
  auto r = node_->StartExec("sb-3", NewExecId(), {});
  EXPECT_FALSE(r.ok());
  ASSERT_TRUE(node_->DeleteSandbox("sb-3").ok());
}

TEST_F(LocalNodeTest, TheFncallServiceAnswersForItsSandboxes) {
  // No runner image resolves: a fncall sandbox is a record until an exec runs.
  ASSERT_TRUE(node_
                  ->StartFncall(
                      [](const std::string&) -> Result<std::vector<std::string>> {
                        return Invalid("no runner images here");
                      },
                      {})
                  .ok());
  auto spec = Spec("sb-fn", runtime::BackendKind::kFncall);
  spec.config.layers.push_back({"sha256:runner", "", false});
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  EXPECT_EQ(counts_.created, 0);  // no container: a record
  auto info = node_->Info();
  EXPECT_EQ(info["backends"].back(), "fncall");
  EXPECT_EQ(info["fncall_sandboxes"], 1);
  EXPECT_EQ(node_->PauseSandbox("sb-fn").code(), Code::kConflict);
  EXPECT_EQ(node_->WriteFile("sb-fn", "/tmp/x", 0644, "x").code(), Code::kConflict);
  EXPECT_EQ(node_->ReadFile("sb-fn", "/tmp/x", 10).status().code(), Code::kConflict);
  EXPECT_TRUE(node_->SetFilesystem("sb-fn", {}).ok());  // every run sees its image as built
  // An exec runs on the runner pool, which cannot resolve the image: the record says so.
  ExecSpec es;
  es.argv = {"true"};
  auto rec = node_->StartExec("sb-fn", NewExecId(), es);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_TRUE((*rec)->WaitDone(10000));
  EXPECT_TRUE((*rec)->ResultJson().contains("error")) << (*rec)->ResultJson().dump();
  ASSERT_TRUE(node_->DeleteSandbox("sb-fn").ok());
  EXPECT_EQ(node_->Info()["fncall_sandboxes"], 0);
  EXPECT_EQ(node_->DeleteSandbox("sb-fn").code(), Code::kNotFound);
}

}  // namespace
}  // namespace warren::node
