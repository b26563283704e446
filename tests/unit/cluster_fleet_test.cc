// The API over a cluster fleet: three nodes heartbeating into MemKv, placement and
// reservations in the store, fake nodes behind the connections. Creates spread and reserve,
// deletes give back, a node whose lease ends has its sandboxes lost and its room given back.
#include "cluster/cluster_fleet.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <thread>

#include "base/ids.h"
#include "cluster/expiry_sweeper.h"
#include "cluster/keys.h"
#include "cluster/kv_state_store.h"
#include "cluster/presence.h"
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

// Replicas of the API server over one store (MemKv): each with its own KvStateStore, fleet and
// presence, as `warren apiserver` runs them. Quotas hold across them, and what a replica that
// died left half-made is cleaned up once by the others.
class ClusterReplicasTest : public ::testing::Test {
 protected:
  struct Replica {
    std::unique_ptr<Presence> presence;
    std::unique_ptr<KvStateStore> state;
    std::unique_ptr<NodeDirectory> directory;
    std::unique_ptr<ClusterFleet> fleet;
    std::unique_ptr<server::TokenRegistry> tokens;
    std::unique_ptr<Api> api;
  };
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir_), nullptr);
    layers_ = std::make_unique<image::LayerStore>(std::string(dir_) + "/store");
    ASSERT_TRUE(layers_->Init().ok());
    for (const char* name : {"n1", "n2"}) {
      NodeRecord r;
      r.name = name;
      r.address = "http://127.0.0.1:1";
      r.capacity = {8000, 8192, 100000};
      r.backends = {runtime::BackendKind::kContainer};
      r.started_at = "2026-12-02T00:00:00Z";
      beats_[name] = std::make_unique<NodeHeartbeat>(
          &kv_, 3, [r] { return r; }, 20);
      ASSERT_TRUE(beats_[name]->Start().ok());
      (void)nodes_[name];  // made now: replicas connect from several threads
    }
    for (const char* name : {"api-1", "api-2", "api-3"}) replicas_[name] = MakeReplica(name);
    ASSERT_TRUE(
        replicas_["api-1"]
            ->state->PutLayer({"py", "1", "sha256:" + std::string(64, 'a'), "base", "t", "tar", 10})
            .ok());
  }
  std::unique_ptr<Replica> MakeReplica(const std::string& name) {
    auto r = std::make_unique<Replica>();
    r->presence = std::make_unique<Presence>(&kv_, name);
    EXPECT_TRUE(r->presence->Start().ok());
    r->state = std::make_unique<KvStateStore>(&kv_, name);
    r->directory = std::make_unique<NodeDirectory>(&kv_);
    r->fleet = std::make_unique<ClusterFleet>(
        &kv_, r->directory.get(),
        [this](const NodeRecord& n) -> std::unique_ptr<node::NodeApi> {
          return std::make_unique<testing::ForwardingNode>(&nodes_[n.name]);
        },
        PlacementPolicy{}, name);
    EXPECT_TRUE(r->directory->Start().ok());
    EXPECT_TRUE(WaitFor([&] { return r->directory->Ready().size() == 2; }));
    r->tokens = std::make_unique<server::TokenRegistry>(r->state.get(), "secret");
    r->api = std::make_unique<Api>(r->state.get(), r->state.get(), r->fleet.get(), layers_.get(),
                                   r->tokens.get());
    return r;
  }
  void TearDown() override {
    replicas_.clear();
    beats_.clear();
    (void)image::RemoveTree(dir_);
  }
  int64_t Reserved(const std::string& node) {
    Reservations r(&kv_);
    return r.Read(node)->sandboxes;
  }
  int64_t Keys(const std::string& prefix) {
    return static_cast<int64_t>(kv_.List(prefix)->kvs.size());
  }

  char dir_[32] = "/tmp/warren-replicas-XXXXXX";
  MemKv kv_;
  std::map<std::string, testing::FakeNode> nodes_;
  std::map<std::string, std::unique_ptr<NodeHeartbeat>> beats_;
  std::unique_ptr<image::LayerStore> layers_;
  std::map<std::string, std::unique_ptr<Replica>> replicas_;
  const Principal admin_{"admin", {"admin"}, {}};
};

TEST_F(ClusterReplicasTest, TwoReplicasNeverBothGrantTheLastSlot) {
  Principal alice{"alice", {"sandbox:*", "exec"}, {}};
  alice.quotas.max_sandboxes = 3;
  alice.quotas.max_memory_mb = 1000;
  std::atomic<int> made{0}, refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 10; ++i)
    clients.emplace_back([&, i] {
      Api* api = replicas_[i % 2 ? "api-1" : "api-2"]->api.get();
      auto r = api->CreateSandbox(alice, R"({"image": "py:1", "memory_mb": 200})");
      if (r.ok())
        ++made;
      else if (r.status().code() == Code::kQuota)
        ++refused;
      else
        ADD_FAILURE() << r.status().ToString();
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(made.load(), 3);
  EXPECT_EQ(refused.load(), 7);
  auto share = replicas_["api-1"]->state->ShareOf("alice");
  ASSERT_TRUE(share.ok());
  EXPECT_EQ(share->sandboxes, 3);
  EXPECT_EQ(share->memory_mb, 600);
  EXPECT_EQ(Reserved("n1") + Reserved("n2"), 3);  // the refused ones gave their room back
  EXPECT_EQ(Keys(keys::kCreating), 0);
  // The memory quota too: 600 of 1000 used, 500 more does not fit, whichever replica asks.
  auto big =
      replicas_["api-2"]->api->CreateSandbox(alice, R"({"image": "py:1", "memory_mb": 500})");
  EXPECT_EQ(big.status().code(), Code::kQuota);
  // A sandbox deleted through one replica frees the slot for the other.
  auto listed = (*replicas_["api-1"]->api->ListSandboxes(alice, {}))["sandboxes"];
  ASSERT_EQ(listed.size(), 3u);
  ASSERT_TRUE(replicas_["api-2"]->api->DeleteSandbox(alice, listed[0]["id"]).ok());
  EXPECT_TRUE(replicas_["api-1"]->api->CreateSandbox(alice, R"({"image": "py:1"})").ok());
  EXPECT_EQ(replicas_["api-1"]->api->CreateSandbox(alice, R"({"image": "py:1"})").status().code(),
            Code::kQuota);
}

TEST_F(ClusterReplicasTest, WhatADeadReplicaLeftHalfMadeIsCleanedUpOnce) {
  Replica& dead = *replicas_["api-3"];
  // Placed, then died before the record: only its claim names the room.
  node::PlacementAsk ask;
  ask.cpu = 1;
  ask.memory_mb = 100;
  ask.sandbox_id = "sb-placed";
  auto placed = dead.fleet->Place(ask);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  // Recorded `creating`, and its node made it: then died.
  ask.sandbox_id = "sb-made";
  auto made_on = dead.fleet->Place(ask);
  ASSERT_TRUE(made_on.ok());
  server::SandboxRecord rec;
  rec.id = "sb-made";
  rec.owner = "alice";
  rec.node = *made_on;
  rec.created_at = "2026-12-02T00:00:00Z";
  rec.state = server::SandboxState::kCreating;
  rec.spec.image = "py:1";
  rec.spec.cpu = 1;
  rec.spec.memory_mb = 100;
  ASSERT_TRUE(dead.state->InsertSandbox(server::ToJson(rec), {}).ok());
  node::NodeSandboxSpec ns;
  ns.config.id = "sb-made";
  ASSERT_TRUE(nodes_[*made_on].CreateSandbox(ns).ok());
  EXPECT_EQ(Reserved("n1") + Reserved("n2"), 2);
  EXPECT_EQ(replicas_["api-1"]->api->CleanOrphanedCreates(), 0);  // its maker still lives

  dead.api.reset();
  dead.fleet.reset();
  dead.presence.reset();  // gone from the cluster (a killed one: when its lease expires)
  std::atomic<int> cleaned{0};
  std::thread other([&] { cleaned += replicas_["api-2"]->api->CleanOrphanedCreates(); });
  cleaned += replicas_["api-1"]->api->CleanOrphanedCreates();
  other.join();
  EXPECT_EQ(cleaned.load(), 2);
  EXPECT_EQ(Reserved("n1") + Reserved("n2"), 0);
  EXPECT_EQ(replicas_["api-1"]->state->GetSandbox("sb-made").status().code(), Code::kNotFound);
  EXPECT_FALSE(nodes_[*made_on].sandboxes.count("sb-made"));
  EXPECT_EQ(Keys(keys::kCreating), 0);
  EXPECT_EQ(Keys(keys::kShares), 0);
  EXPECT_EQ(replicas_["api-1"]->api->CleanOrphanedCreates(), 0);
}

// A sandbox's TTL holds whichever replica made it: the replica sweeping the TTL index ends it
// through the real API (room and record go), even after its maker died.
TEST_F(ClusterReplicasTest, TheSweepingReplicaEnforcesEveryTtl) {
  auto made = replicas_["api-1"]->api->CreateSandbox(admin_, R"({"image": "py:1", "ttl_s": 1})");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string id = (*made)["id"];
  EXPECT_EQ(Keys(keys::kExpiry), 1);
  auto sweeper = [&](const std::string& name) {
    Replica* r = replicas_[name].get();
    return std::make_unique<ExpirySweeper>(
        &kv_, name, [r] { return r->presence->lease(); },
        [r](const std::string& sb) { return r->api->ExpireSandbox(sb); });
  };
  auto by_1 = sweeper("api-1"), by_2 = sweeper("api-2");
  const int64_t now_ms = static_cast<int64_t>(UnixNow() * 1000);
  EXPECT_EQ(by_1->Sweep(now_ms), 0);     // api-1 leads; nothing is due yet
  replicas_["api-1"]->api.reset();       // its maker is gone...
  replicas_["api-1"]->presence.reset();  // ...and so is its lease
  EXPECT_EQ(by_2->Sweep(now_ms + 2000), 1);
  EXPECT_TRUE(by_2->leading());
  EXPECT_EQ(replicas_["api-2"]->api->GetSandbox(admin_, id).status().code(), Code::kNotFound);
  EXPECT_EQ(Reserved("n1") + Reserved("n2"), 0);
  EXPECT_EQ(Keys(keys::kExpiry), 0);
}

}  // namespace
}  // namespace warren::cluster
