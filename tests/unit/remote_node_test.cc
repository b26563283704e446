// RemoteNode against NodeService over real HTTP on loopback, with a FakeNode behind the
// service: what the API server asks of a remote node arrives as asked, failures come back
// whole (code, errno), exec output is mirrored with the node's sequence numbers (also by a
// second "replica" that joins late), and nothing hangs when the node or the client goes away.
#include "cluster/remote_node.h"

#include <errno.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cluster/node_service.h"
#include "fake_node.h"
#include "server/http_server.h"

namespace warren::cluster {
namespace {

using namespace std::chrono_literals;

constexpr char kSecret[] = "cluster-secret-for-tests";

class RemoteNodeTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("127.0.0.1:0"); }
  void StartServer(const std::string& listen) {
    service_ = std::make_unique<NodeService>(&fake_, kSecret);
    server::ServerOptions opts;
    opts.listen = listen;
    http_ = std::make_unique<server::HttpServer>(service_.get(), opts);
    ASSERT_TRUE(http_->Start().ok());
    port_ = http_->port();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<RemoteNode> Connect(RemoteNodeOptions opts = {}) {
    opts.lost_poll_ms = 20;
    return std::make_unique<RemoteNode>("n1", Url(), kSecret, opts);
  }
  static node::NodeSandboxSpec Spec(const std::string& id) {
    node::NodeSandboxSpec s;
    s.config.id = id;
    s.config.hostname = id;
    runtime::LayerRef layer;
    layer.digest = "sha256:" + std::string(64, 'a');
    s.config.layers = {layer};
    return s;
  }
  // Sandbox sb-1 on `node` with a command that runs until the test ends it (the fake's
  // `hold`): the API server's mirror of exec ex-1.
  static std::shared_ptr<node::ExecRecord> StartHeld(RemoteNode* node) {
    if (!node->CreateSandbox(Spec("sb-1")).ok()) return nullptr;
    node::ExecSpec spec;
    spec.argv = {"hold"};
    auto mirror = node->StartExec("sb-1", "ex-1", spec);
    return mirror.ok() ? *mirror : nullptr;
  }
  // Waits until `pred` holds (a few seconds at most).
  template <typename P>
  static bool Eventually(P pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return pred();
  }

  testing::FakeNode fake_;
  std::unique_ptr<NodeService> service_;
  std::unique_ptr<server::HttpServer> http_;
  uint16_t port_ = 0;
};

TEST_F(RemoteNodeTest, SandboxOperationsArriveAsAsked) {
  auto node = Connect();
  auto rt = node->CreateSandbox(Spec("sb-1"));
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_GT(rt->host_pid, 0);
  {
    std::lock_guard lock(fake_.mu);
    ASSERT_TRUE(fake_.sandboxes.count("sb-1"));
    EXPECT_EQ(fake_.sandboxes["sb-1"].spec.config.layers.at(0).digest,
              "sha256:" + std::string(64, 'a'));
  }
  // Bytes of every value survive, a NUL and invalid UTF-8 included.
  const std::string data("a\0b\xff\n", 5);
  ASSERT_TRUE(node->WriteFile("sb-1", "/work/x y?&=.txt", 0600, data).ok());
  EXPECT_EQ(fake_.File("sb-1", "/work/x y?&=.txt"), data);
  auto back = node->ReadFile("sb-1", "/work/x y?&=.txt", 1 << 20);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  EXPECT_TRUE(node->PauseSandbox("sb-1").ok());
  EXPECT_TRUE(fake_.sandboxes["sb-1"].paused);
  auto density = node->Density("sb-1");
  ASSERT_TRUE(density.ok()) << density.status().ToString();
  EXPECT_EQ(density->activity, node::density::Activity::kHibernated);
  EXPECT_EQ(density->memory.swapped_bytes, 40u << 20);
  EXPECT_EQ(density->wakes, 2u);
  EXPECT_EQ(density->max_wake_ms, 12.5);
  EXPECT_EQ(node->Density("nope").status().code(), Code::kNotFound);
  EXPECT_TRUE(node->ResumeSandbox("sb-1").ok());
  EXPECT_TRUE(node->SetNetwork("sb-1", net::Policy{}).ok());
  EXPECT_TRUE(node->SetFilesystem("sb-1", isolation::FsPolicy{{"/etc"}, {}}).ok());
  EXPECT_TRUE(node->Changes("sb-1", "/", 10).ok());
  EXPECT_TRUE(node->AdoptSandbox("sb-1").ok());
  EXPECT_EQ(node->RunningExecs("sb-1"), 0);
  EXPECT_EQ(node->Info().value("sandboxes", -1), 1);
  EXPECT_TRUE(node->DeleteSandbox("sb-1").ok());
  EXPECT_TRUE(fake_.deleted.count("sb-1"));
}

TEST_F(RemoteNodeTest, AMemoryForkTravelsWithItsToken) {
  auto node = Connect();
  ASSERT_TRUE(node->CreateSandbox(Spec("sb-1")).ok());
  // A node that cannot: kUnavailable comes back as such (the API then forks files).
  EXPECT_EQ(node->PrepareFork("sb-1").status().code(), Code::kUnavailable);
  fake_.memory_forks = true;
  auto fork = node->PrepareFork("sb-1");
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_EQ(fork->token, testing::FakeNode::ForkToken(1));
  EXPECT_EQ(fork->ram_bytes, 1u << 20);
  EXPECT_EQ(fork->paused_ms, 5);
  auto child = Spec("sb-2");
  child.fork = fork->token;
  ASSERT_TRUE(node->CreateSandbox(child).ok());
  {
    std::lock_guard lock(fake_.mu);
    EXPECT_EQ(fake_.sandboxes["sb-2"].spec.fork, fork->token);
  }
  EXPECT_TRUE(node->EndFork(fork->token).ok());
  EXPECT_EQ(fake_.ended_forks, std::vector<std::string>{fork->token});
  EXPECT_EQ(node->EndFork("../../x").code(), Code::kInvalid);
}

TEST_F(RemoteNodeTest, FailuresComeBackWhole) {
  auto node = Connect();
  Status missing = node->DeleteSandbox("nope");
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_NE(missing.ToString().find("nope"), std::string::npos);
  // A host errno stays an errno, so that the API server can hide it (node::NodeFault).
  fake_.fail_next["create"] = ErrnoStatus("mount", "/var/lib/warren/x", EPERM);
  auto failed = node->CreateSandbox(Spec("sb-2"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().err(), EPERM);
  EXPECT_EQ(failed.status().op(), "mount");
  EXPECT_EQ(node::NodeFault(failed.status()).code(), Code::kInternal);
  fake_.fail_next["create"] = Status(Code::kQuota, "create", "sb-3", "full").WithRetryAfter(7);
  auto full = node->CreateSandbox(Spec("sb-3"));
  EXPECT_EQ(full.status().code(), Code::kQuota);
  EXPECT_EQ(full.status().retry_after_s(), 7);
  // A spec the node cannot parse is refused by it, not guessed at.
  node::NodeSandboxSpec bad = Spec("sb-4");
  bad.config.layers.clear();
  EXPECT_EQ(node->CreateSandbox(bad).status().code(), Code::kInvalid);
}

TEST_F(RemoteNodeTest, OnlyTheClusterCredentialIsAccepted) {
  RemoteNode stranger("n1", Url(), "a-tenant-token");
  EXPECT_EQ(stranger.CreateSandbox(Spec("sb-x")).status().code(), Code::kUnauthorized);
  EXPECT_TRUE(fake_.sandboxes.empty());
  // With no credential configured, a node takes no request at all.
  NodeService open(&fake_, "");
  EXPECT_FALSE(open.Authenticate("Bearer ").has_value());
}

TEST_F(RemoteNodeTest, UnreachableNodeIsUnavailable) {
  http_->Stop();
  auto node = Connect();
  auto r = node->CreateSandbox(Spec("sb-1"));
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_GT(r.status().retry_after_s(), 0);
}

TEST_F(RemoteNodeTest, ExecOutputIsMirroredWithTheNodesSequence) {
  auto node = Connect();
  ASSERT_TRUE(node->CreateSandbox(Spec("sb-1")).ok());
  node::ExecSpec spec;
  spec.argv = {"hold"};
  auto mirror = node->StartExec("sb-1", "ex-1", spec);
  ASSERT_TRUE(mirror.ok()) << mirror.status().ToString();
  auto held = fake_.GetExec("sb-1", "ex-1");
  ASSERT_TRUE(held.ok());
  // "é" split across two chunks: each chunk alone is invalid UTF-8.
  (*held)->AppendOutput(1, "caf\xc3");
  (*held)->AppendOutput(2, "warn\n");
  (*held)->AppendOutput(1, "\xa9\n");
  ASSERT_TRUE(Eventually([&] { return (*mirror)->last_seq() == 3; }));
  EXPECT_FALSE((*mirror)->done());

  // A second API server joins late: it mirrors from the node's start, same seqs.
  auto replica = Connect();
  auto late = replica->GetExec("sb-1", "ex-1");
  ASSERT_TRUE(late.ok());
  node::ExecOutcome outcome;
  outcome.exit_code = 3;
  (*held)->Finish(outcome);
  ASSERT_TRUE((*mirror)->WaitDone(5000));
  ASSERT_TRUE((*late)->WaitDone(5000));
  for (const auto& rec : {*mirror, *late}) {
    auto snap = rec->Poll(0, nullptr);
    ASSERT_EQ(snap.chunks.size(), 3u);
    EXPECT_EQ(snap.chunks[1].seq, 2u);
    EXPECT_EQ(snap.chunks[1].stream, 2);
    const auto result = rec->ResultJson();
    EXPECT_EQ(result["stdout"], "caf\xc3\xa9\n");
    EXPECT_EQ(result["stderr"], "warn\n");
    EXPECT_EQ(result["exit_code"], 3);
    EXPECT_EQ(rec->last_seq(), (*held)->last_seq());
  }
  // Asked again, the finished mirror is served from memory.
  auto again = node->GetExec("sb-1", "ex-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), mirror->get());
  EXPECT_EQ(node->GetExec("sb-1", "no-such").status().code(), Code::kNotFound);
}

TEST_F(RemoteNodeTest, FinisherSetBeforeTheCommandRunsSeesTheEnd) {
  auto node = Connect();
  ASSERT_TRUE(node->CreateSandbox(Spec("sb-1")).ok());
  node::ExecSpec spec;
  spec.argv = {"exit", "4"};
  std::atomic<int> finished{0};
  spec.on_record = [&](const std::shared_ptr<node::ExecRecord>& rec) {
    std::weak_ptr<node::ExecRecord> weak = rec;
    rec->SetFinisher([&finished, weak] {
      ++finished;
      if (auto r = weak.lock()) r->Publish();
    });
  };
  auto mirror = node->StartExec("sb-1", "ex-1", spec);
  ASSERT_TRUE(mirror.ok());
  ASSERT_TRUE((*mirror)->WaitDone(5000));
  EXPECT_EQ(finished.load(), 1);
  EXPECT_EQ((*mirror)->ResultJson()["exit_code"], 4);
}

TEST_F(RemoteNodeTest, LostSandboxesAreReported) {
  auto node = Connect();
  std::mutex mu;
  std::vector<std::string> lost;
  node->SetOnSandboxLost([&](const std::string& id, const std::string&) {
    std::lock_guard lock(mu);
    lost.push_back(id);
  });
  ASSERT_TRUE(node->CreateSandbox(Spec("sb-1")).ok());
  fake_.Lose("sb-1");
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard lock(mu);
    return lost.size() == 1;
  }));
  EXPECT_EQ(lost[0], "sb-1");
  std::this_thread::sleep_for(100ms);  // reported once, not at every poll
  std::lock_guard lock(mu);
  EXPECT_EQ(lost.size(), 1u);
}

TEST_F(RemoteNodeTest, MirrorOfAVanishedNodeEndsWithAnError) {
  RemoteNodeOptions opts;
  opts.give_up_s = 1;
  auto node = Connect(opts);
  auto mirror = StartHeld(node.get());
  ASSERT_NE(mirror, nullptr);
  http_.reset();
  ASSERT_TRUE(mirror->WaitDone(10000));
  EXPECT_NE(mirror->ResultJson().value("error", "").find("unreachable"), std::string::npos);
}

TEST_F(RemoteNodeTest, StreamResumesAfterTheNodeComesBack) {
  auto node = Connect();
  auto mirror = StartHeld(node.get());
  ASSERT_NE(mirror, nullptr);
  auto held = fake_.GetExec("sb-1", "ex-1");
  (*held)->AppendOutput(1, "one\n");
  ASSERT_TRUE(Eventually([&] { return mirror->last_seq() == 1; }));
  // The node's API restarts on the same port (its sandboxes and records survive, as
  // adoption keeps them): the mirror reads on from seq 2, with nothing twice.
  const uint16_t port = port_;
  http_->Stop();
  http_.reset();
  (*held)->AppendOutput(1, "two\n");
  StartServer("127.0.0.1:" + std::to_string(port));
  node::ExecOutcome outcome;
  outcome.exit_code = 0;
  (*held)->Finish(outcome);
  ASSERT_TRUE(mirror->WaitDone(10000));
  EXPECT_EQ(mirror->ResultJson()["stdout"], "one\ntwo\n") << mirror->ResultJson().dump();
  EXPECT_EQ(mirror->last_seq(), 2u);
}

TEST_F(RemoteNodeTest, ClosingWithCommandsRunningDoesNotHang) {
  auto node = Connect();
  auto mirror = StartHeld(node.get());
  ASSERT_NE(mirror, nullptr);
  node.reset();
  EXPECT_TRUE(mirror->done());
  EXPECT_FALSE(mirror->ResultJson().value("error", "").empty());
}

}  // namespace
}  // namespace warren::cluster
