// The API over a cluster fleet: three nodes heartbeating into MemKv, placement and
// reservations in the store, fake nodes behind the connections. Creates spread and reserve,
// deletes give back, a node whose lease ends has its sandboxes lost and its room given back.
#include "cluster/cluster_fleet.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "cluster/keys.h"
#include "fake_node.h"
#include "image/tar_extract.h"
#include "mem_kv.h"
#include "server/routes.h"

namespace warren::cluster {
namespace {

using nlohmann::json;
using server::Api;
using server::Principal;

bool WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 500 && !cond(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return cond();
}

class ClusterFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir_), nullptr);
    state_ = std::move(*server::StateStore::Open(std::string(dir_) + "/state.db"));
    durable_ = std::move(*server::StateStore::Open(std::string(dir_) + "/state.db", true));
    layers_ = std::make_unique<image::LayerStore>(std::string(dir_) + "/store");
    ASSERT_TRUE(layers_->Init().ok());
    ASSERT_TRUE(
        state_->PutLayer({"py", "1", "sha256:" + std::string(64, 'a'), "base", "t", "tar", 10})
            .ok());
    tokens_ = std::make_unique<server::TokenRegistry>(state_.get(), "secret");
    for (const char* name : {"n1", "n2", "n3"}) {
      NodeRecord r;
      r.name = name;
      r.address = "http://127.0.0.1:1";
      r.capacity = {4000, 4096, 100000};  // 4 sandboxes of 1 core
      r.backends = {runtime::BackendKind::kContainer};
      r.started_at = "2026-12-02T00:00:00Z";
      beats_[name] = std::make_unique<NodeHeartbeat>(
          &kv_, 3, [r] { return r; }, 20);
      ASSERT_TRUE(beats_[name]->Start().ok());
    }
    dir_view_ = std::make_unique<NodeDirectory>(&kv_);
    fleet_ = std::make_unique<ClusterFleet>(
        &kv_, dir_view_.get(),
        [this](const NodeRecord& r) -> std::unique_ptr<node::NodeApi> {
          return std::make_unique<testing::ForwardingNode>(&nodes_[r.name]);
        },
        PlacementPolicy{});
    ASSERT_TRUE(dir_view_->Start().ok());
    ASSERT_TRUE(WaitFor([&] { return dir_view_->Ready().size() == 3; }));
    api_ = std::make_unique<Api>(state_.get(), durable_.get(), fleet_.get(), layers_.get(),
                                 tokens_.get());
  }
  void TearDown() override {
    api_.reset();
    fleet_.reset();
    dir_view_.reset();
    beats_.clear();
    (void)image::RemoveTree(dir_);
  }
  int64_t Reserved(const std::string& node) {
    Reservations r(&kv_);
    return r.Read(node)->sandboxes;
  }

  char dir_[32] = "/tmp/warren-fleettest-XXXXXX";
  MemKv kv_;
  std::map<std::string, testing::FakeNode> nodes_;
  std::map<std::string, std::unique_ptr<NodeHeartbeat>> beats_;
  std::unique_ptr<NodeDirectory> dir_view_;
  std::unique_ptr<ClusterFleet> fleet_;
  std::unique_ptr<server::StateStore> state_, durable_;
  std::unique_ptr<image::LayerStore> layers_;
  std::unique_ptr<server::TokenRegistry> tokens_;
  std::unique_ptr<Api> api_;
  const Principal admin_{"admin", {"admin"}, {}};
};

TEST_F(ClusterFleetTest, CreatesSpreadReserveAndGiveBack) {
  std::map<std::string, int> per_node;
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    auto r = api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1, "memory_mb": 256})");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ++per_node[(*r)["node"].get<std::string>()];
    ids.push_back((*r)["id"]);
  }
  EXPECT_EQ(per_node.size(), 3u) << "spread over every node";
  for (const auto& [name, n] : per_node) {
    EXPECT_EQ(Reserved(name), n);
    EXPECT_EQ(static_cast<int>(nodes_[name].sandboxes.size()), n);
  }
  // 12 fit (3 nodes x 4 cores): the 13th is a quota error with a retry hint.
  for (int i = 6; i < 12; ++i)
    ASSERT_TRUE(api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1})").ok());
  auto full = api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1})");
  EXPECT_EQ(full.status().code(), Code::kQuota);
  // Deleting gives the room back on its node.
  json first = *api_->GetSandbox(admin_, ids[0]);
  const std::string where = first["node"];
  const int64_t before = Reserved(where);
  ASSERT_TRUE(api_->DeleteSandbox(admin_, ids[0]).ok());
  EXPECT_EQ(Reserved(where), before - 1);
  EXPECT_TRUE(api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1})").ok());
  // /v1/nodes lists the cluster's nodes, without their addresses.
  json nodes = api_->Nodes()["nodes"];
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_FALSE(nodes[0].contains("address"));
  EXPECT_EQ(nodes[0]["state"], "ready");
}

TEST_F(ClusterFleetTest, ANodeThatStopsHeartbeatingLosesItsSandboxes) {
  std::map<std::string, std::vector<std::string>> on;
  for (int i = 0; i < 6; ++i) {
    auto r = api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1})");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    on[(*r)["node"].get<std::string>()].push_back((*r)["id"]);
  }
  // n2's process is gone: no more keepalives, and its lease runs out (as etcd expires it: its
  // keys go; expiry itself is tested in cluster_test.cc and against etcd).
  beats_["n2"]->Stop(false);
  ASSERT_TRUE(kv_.RevokeLease(beats_["n2"]->lease()).ok());
  ASSERT_TRUE(WaitFor([&] { return (*api_->GetSandbox(admin_, on["n2"][0]))["state"] == "lost"; }));
  json lost = *api_->GetSandbox(admin_, on["n2"][0]);
  EXPECT_EQ(lost["reason"], "node n2 stopped heartbeating");
  EXPECT_EQ(Reserved("n2"), 0);
  // The others' sandboxes are untouched and reachable.
  const std::string other = on["n1"].empty() ? on["n3"][0] : on["n1"][0];
  EXPECT_EQ((*api_->GetSandbox(admin_, other))["state"], "running");
  EXPECT_TRUE(api_->StartExec(admin_, other, R"({"argv": ["exit", "0"]})").ok());
  // New sandboxes go to the nodes that are left; the lost one is deleted without its node.
  for (int i = 0; i < 2; ++i) {
    auto r = api_->CreateSandbox(admin_, R"({"image": "py:1", "cpu": 1})");
    ASSERT_TRUE(r.ok());
    EXPECT_NE((*r)["node"], "n2");
  }
  ASSERT_TRUE(api_->DeleteSandbox(admin_, on["n2"][0]).ok());
  EXPECT_EQ(Reserved("n2"), 0);
}

}  // namespace
}  // namespace warren::cluster
