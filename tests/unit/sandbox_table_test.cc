// The typed sandbox record (strict parse, round trip) and the table's one transition function
// (illegal moves refused, counts kept without reading records); two tables (and two token
// registries) over one etcd store, as two API servers of a cluster share it.
#include "server/sandbox_table.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <thread>

#include "cluster/kv_state_store.h"
#include "image/tar_extract.h"
#include "mem_kv.h"
#include "server/auth.h"
#include "server/leases.h"
#include "server/state_store.h"

namespace warren::server {
namespace {

using S = SandboxState;

SandboxRecord Record(const std::string& id, SandboxState state,
                     runtime::BackendKind backend = runtime::BackendKind::kContainer) {
  SandboxRecord r;
  r.id = id;
  r.owner = "alice";
  r.node = "local";
  r.created_at = "2026-12-02T00:00:00.000Z";
  r.state = state;
  r.spec.image = "py:3.11";
  r.spec.backend = backend;
  r.spec.trajectory = "t-1";
  r.spec.labels = {{"job", "rl"}};
  r.layers = {{"py:3.11", "base", "sha256:aa"}};
  return r;
}

class SandboxTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir_), nullptr);
    auto s = StateStore::Open(std::string(dir_) + "/state.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    (void)image::RemoveTree(dir_);
  }
  char dir_[32] = "/tmp/warren-sbtable-XXXXXX";
  std::unique_ptr<StateStore> store_;
};

TEST(SandboxRecord, RoundTripsThroughItsJson) {
  SandboxRecord r = Record("sb-1", S::kPaused);
  r.error = SandboxRecord::Error{"internal", "lost"};
  r.replay_stopped = "why";
  json j = ToJson(r);
  EXPECT_EQ(j["state"], "paused");
  EXPECT_EQ(j["trajectory"], "t-1");
  auto back = ParseSandboxRecord(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
}

TEST(SandboxRecord, AnUnknownOrMissingFieldIsAnError) {
  json j = ToJson(Record("sb-1", S::kRunning));
  json extra = j;
  extra["surprise"] = 1;
  EXPECT_EQ(ParseSandboxRecord(extra).status().code(), Code::kInvalid);
  for (const char* key : {"id", "owner", "state", "layers", "error", "created_at", "node"}) {
    json missing = j;
    missing.erase(key);
    EXPECT_FALSE(ParseSandboxRecord(missing).ok()) << key;
  }
  json bad_state = j;
  bad_state["state"] = "deleted";
  EXPECT_EQ(ParseSandboxRecord(bad_state).status().code(), Code::kInvalid);
}

TEST(SandboxRecord, OnlyTheDrawnMovesAreLegal) {
  // Every (from, to) pair: exactly these are allowed.
  const std::set<std::pair<S, S>> legal = {
      {S::kCreating, S::kRunning},
      {S::kCreating, S::kFailed},
      {S::kRunning, S::kPaused},
      {S::kRunning, S::kStopping},
      {S::kRunning, S::kFailed},
      {S::kPaused, S::kRunning},
      {S::kPaused, S::kStopping},
      {S::kPaused, S::kFailed},
      {S::kStopping, S::kRunning},
      {S::kStopping, S::kPaused},
      {S::kStopping, S::kFailed},
      // A node that left: its sandboxes are lost; back, or failed when it returns.
      {S::kCreating, S::kLost},
      {S::kRunning, S::kLost},
      {S::kPaused, S::kLost},
      {S::kStopping, S::kLost},
      {S::kLost, S::kRunning},
      {S::kLost, S::kPaused},
      {S::kLost, S::kFailed}};
  for (S from : kAllSandboxStates)
    for (S to : kAllSandboxStates)
      EXPECT_EQ(CanMove(from, to), legal.count({from, to}) == 1)
          << StateName(from) << " -> " << StateName(to);
}

TEST_F(SandboxTableTest, TransitionRefusesIllegalAndUnexpectedMoves) {
  SandboxTable t(store_.get());
  ASSERT_TRUE(t.Insert(Record("sb-1", S::kCreating)).ok());
  EXPECT_EQ(t.Insert(Record("sb-1", S::kCreating)).code(), Code::kConflict);
  // creating -> paused is not a move.
  auto bad = t.Transition("sb-1", S::kPaused);
  EXPECT_EQ(bad.status().code(), Code::kConflict);
  EXPECT_NE(bad.status().ToString().find("sandbox is creating"), std::string::npos)
      << bad.status().ToString();
  ASSERT_TRUE(t.Transition("sb-1", S::kRunning, {S::kCreating}).ok());
  // Expected from paused, but it is running.
  EXPECT_EQ(t.Transition("sb-1", S::kStopping, {S::kPaused}).status().code(), Code::kConflict);
  // The edit sees the state being left; it lands with the move.
  S seen = S::kFailed;
  auto failed = t.Transition("sb-1", S::kFailed, {}, [&](SandboxRecord& r) {
    seen = r.state;
    r.error = SandboxRecord::Error{"internal", "lost"};
  });
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(seen, S::kRunning);
  auto got = t.Get("sb-1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, S::kFailed);
  ASSERT_TRUE(got->error.has_value());
  EXPECT_EQ(got->error->message, "lost");
  // Failed is final.
  for (S to : kAllSandboxStates) EXPECT_FALSE(t.Transition("sb-1", to).ok()) << StateName(to);
  EXPECT_EQ(t.Transition("sb-9", S::kRunning).status().code(), Code::kNotFound);
}

TEST_F(SandboxTableTest, UpdateKeepsTheStateAndARefusalWritesNothing) {
  SandboxTable t(store_.get());
  ASSERT_TRUE(t.Insert(Record("sb-1", S::kRunning)).ok());
  auto up = t.Update("sb-1", [](SandboxRecord& r) {
    r.spec.network.mode = "egress";
    r.state = S::kFailed;  // ignored: Update changes no state
    return Status::Ok();
  });
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->state, S::kRunning);
  EXPECT_EQ(t.Get("sb-1")->spec.network.mode, "egress");
  auto refused = t.Update("sb-1", [](SandboxRecord& r) {
    r.spec.network.mode = "none";
    return Invalid("no");
  });
  EXPECT_EQ(refused.status().code(), Code::kInvalid);
  EXPECT_EQ(t.Get("sb-1")->spec.network.mode, "egress");
  EXPECT_EQ(t.counts().at({runtime::BackendKind::kContainer, S::kRunning}), 1);
}

TEST_F(SandboxTableTest, CountsFollowEveryChangeAndSurviveReopen) {
  {
    SandboxTable t(store_.get());
    ASSERT_TRUE(t.Insert(Record("sb-1", S::kCreating)).ok());
    ASSERT_TRUE(t.Insert(Record("sb-2", S::kCreating, runtime::BackendKind::kFncall)).ok());
    ASSERT_TRUE(t.Transition("sb-1", S::kRunning).ok());
    ASSERT_TRUE(t.Transition("sb-1", S::kPaused).ok());
    ASSERT_TRUE(t.Transition("sb-2", S::kRunning).ok());
    ASSERT_TRUE(t.Insert(Record("sb-3", S::kCreating)).ok());
    ASSERT_TRUE(t.Remove("sb-3").ok());
    SandboxTable::Counts want = {{{runtime::BackendKind::kContainer, S::kPaused}, 1},
                                 {{runtime::BackendKind::kFncall, S::kRunning}, 1},
                                 {{runtime::BackendKind::kContainer, S::kCreating}, 0},
                                 {{runtime::BackendKind::kFncall, S::kCreating}, 0},
                                 {{runtime::BackendKind::kContainer, S::kRunning}, 0}};
    EXPECT_EQ(t.counts(), want);
  }
  // A new table (a restarted daemon) counts what the store holds; a record it cannot parse
  // is left out of lists and counts, and reading it by id is an internal error.
  ASSERT_TRUE(
      store_->PutSandbox({{"id", "sb-bad"}, {"state", "running"}, {"created_at", "t"}}).ok());
  SandboxTable t(store_.get());
  SandboxTable::Counts want = {{{runtime::BackendKind::kContainer, S::kPaused}, 1},
                               {{runtime::BackendKind::kFncall, S::kRunning}, 1}};
  EXPECT_EQ(t.counts(), want);
  EXPECT_EQ(t.List().size(), 2u);
  EXPECT_EQ(t.Get("sb-bad").status().code(), Code::kInternal);
}

// Two API servers of a cluster (two tables over one etcd store): concurrent changes to one
// record all land, and of two racing transitions out of one state exactly one wins.
// ListShared parses a record once and again only when its stored text changed; what went
// is forgotten. Over SQLite (warren serve) and over a cluster's store, where another replica's
// write must show in the next list.
void ListSharedFollowsTheStore(SandboxTable& mine, SandboxTable& other) {
  ASSERT_TRUE(mine.Insert(Record("sb-1", S::kCreating)).ok());
  ASSERT_TRUE(mine.Insert(Record("sb-2", S::kCreating)).ok());
  auto by_id = [&](SandboxTable& t) {
    std::map<std::string, SandboxTable::Shared> out;
    auto list = t.ListShared();
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    if (list.ok())
      for (auto& r : *list) out[r->id] = r;
    return out;
  };
  auto first = by_id(mine);
  ASSERT_EQ(first.size(), 2u);
  auto again = by_id(mine);
  EXPECT_EQ(again["sb-1"].get(), first["sb-1"].get());  // not parsed again
  ASSERT_TRUE(other.Transition("sb-2", S::kRunning, {S::kCreating}).ok());
  ASSERT_TRUE(other.Insert(Record("sb-3", S::kCreating)).ok());
  ASSERT_TRUE(other.Remove("sb-1").ok());
  auto after = by_id(mine);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_FALSE(after.count("sb-1"));
  EXPECT_EQ(after["sb-2"]->state, S::kRunning);
  EXPECT_NE(after["sb-2"].get(), first["sb-2"].get());
  EXPECT_EQ(after["sb-3"]->state, S::kCreating);
}

// Get keeps what it parsed too, but must never answer from it once the stored record changed
// or went, whoever wrote it.
void GetFollowsTheStore(SandboxTable& mine, SandboxTable& other) {
  ASSERT_TRUE(mine.Insert(Record("sb-9", S::kCreating)).ok());
  EXPECT_EQ(mine.Get("sb-9")->state, S::kCreating);
  EXPECT_EQ(mine.Get("sb-9")->state, S::kCreating);  // from what it kept
  ASSERT_TRUE(other.Transition("sb-9", S::kRunning, {S::kCreating}).ok());
  ASSERT_TRUE(other
                  .Update("sb-9",
                          [](SandboxRecord& r) {
                            r.spec.labels["step"] = "2";
                            return Status::Ok();
                          })
                  .ok());
  auto after = mine.Get("sb-9");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->state, S::kRunning);
  EXPECT_EQ(after->spec.labels.at("step"), "2");
  ASSERT_TRUE(other.Remove("sb-9").ok());
  EXPECT_EQ(mine.Get("sb-9").status().code(), Code::kNotFound);
  // The same id again is a new record, not the one kept before.
  ASSERT_TRUE(other.Insert(Record("sb-9", S::kCreating)).ok());
  EXPECT_EQ(mine.Get("sb-9")->state, S::kCreating);
}

void ReadsFollowTheStore(SandboxTable& mine, SandboxTable& other) {
  ListSharedFollowsTheStore(mine, other);
  GetFollowsTheStore(mine, other);
}

TEST_F(SandboxTableTest, ReadsParseOnlyWhatChanged) {
  SandboxTable table(store_.get());
  ReadsFollowTheStore(table, table);
}

TEST(SandboxTableReplicas, ReadsSeeAnotherReplicasWrites) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  SandboxTable a(&store), b(&store);
  ReadsFollowTheStore(a, b);
}

TEST(SandboxTableReplicas, ConcurrentChangesAreNeverLost) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  SandboxTable a(&store), b(&store);
  ASSERT_TRUE(a.Insert(Record("sb-1", S::kCreating)).ok());
  EXPECT_EQ(b.Insert(Record("sb-1", S::kCreating)).code(), Code::kConflict);
  auto add_labels = [](SandboxTable* t, const std::string& prefix) {
    for (int i = 0; i < 25; ++i)
      ASSERT_TRUE(t->Update("sb-1", [&](SandboxRecord& r) {
                     r.spec.labels[prefix + std::to_string(i)] = "x";
                     return Status::Ok();
                   }).ok());
  };
  std::thread ta(add_labels, &a, "a"), tb(add_labels, &b, "b");
  ta.join();
  tb.join();
  auto rec = a.Get("sb-1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->spec.labels.size(), 51u);  // "job" and 25 from each

  std::atomic<int> won{0}, refused{0};
  auto start = [&](SandboxTable* t) {
    auto r = t->Transition("sb-1", S::kRunning, {S::kCreating});
    (r.ok() ? won : refused)++;
  };
  std::thread sa(start, &a), sb(start, &b);
  sa.join();
  sb.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(b.Get("sb-1")->state, S::kRunning);
}

}  // namespace
}  // namespace warren::server

namespace warren::server {
namespace {

// Two API servers of a cluster share tokens: one made through A works at once through B, and
// one removed through A stops working on B at B's next reload.
TEST(TokenRegistryReplicas, TokensReachEveryReplica) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  TokenRegistry a(&store, "wt_admin_token_of_the_cluster"),
      b(&store, "wt_admin_token_of_the_cluster");
  ASSERT_TRUE(a.Load().ok());
  ASSERT_TRUE(b.Load().ok());
  b.SetReloadOnMiss(true);
  auto made = a.Create(R"({"name": "alice"})");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string header = "Bearer " + (*made)["token"].get<std::string>();
  auto who = b.Authenticate(header);
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->name, "alice");
  EXPECT_FALSE(b.Authenticate("Bearer " + std::string(40, 'x')).has_value());
  ASSERT_TRUE(a.Remove("alice").ok());
  EXPECT_TRUE(b.Authenticate(header).has_value());  // until B reads the store again
  ASSERT_TRUE(b.Load().ok());
  EXPECT_FALSE(b.Authenticate(header).has_value());
  // A store that cannot be read changes nothing (it does not revoke every token).
  auto again = a.Create(R"({"name": "bob"})");
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(b.Load().ok());
  kv.SetAvailable(false);
  EXPECT_FALSE(b.Load().ok());
  EXPECT_TRUE(b.Authenticate("Bearer " + (*again)["token"].get<std::string>()).has_value());
  kv.SetAvailable(true);
}

// Many requests with a token made a moment ago through another replica, at once: every one
// is let in (each sees a reading of the store begun after it arrived), and they share readings.
TEST(TokenRegistryReplicas, ConcurrentMissesOfANewTokenAllSucceed) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  TokenRegistry a(&store, "wt_admin_token_of_the_cluster"),
      b(&store, "wt_admin_token_of_the_cluster");
  ASSERT_TRUE(b.Load().ok());
  b.SetReloadOnMiss(true);
  for (int round = 0; round < 3; ++round) {
    auto made = a.Create(nlohmann::json{{"name", "t" + std::to_string(round)}}.dump());
    ASSERT_TRUE(made.ok());
    const std::string header = "Bearer " + (*made)["token"].get<std::string>();
    std::atomic<int> in{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < 8; ++i)
      clients.emplace_back([&] { in += b.Authenticate(header).has_value(); });
    for (auto& t : clients) t.join();
    EXPECT_EQ(in.load(), 8) << "round " << round;
  }
}

// Leases shared by two API servers: made through one, renewed through the other, seen by
// both; when it expires, exactly one replica applies its expiry.
TEST(LeaseTableReplicas, LeasesAreTheStoresAndExpireOnce) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  LeaseTable a(&store), b(&store);
  a.SetShared(true);
  b.SetShared(true);
  const Principal alice{"alice", {"sandbox:*"}, {}}, bob{"bob", {"sandbox:*"}, {}};
  auto made = a.Create(alice, R"({"ttl_s": 1})");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string id = (*made)["id"];
  EXPECT_TRUE(b.Get(alice, id).ok());  // made through a, known to b
  EXPECT_EQ(b.Get(bob, id).status().code(), Code::kNotFound);
  auto renewed = b.Renew(alice, id, R"({"ttl_s": 60})");
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // a made it with 1 s, b renewed it for 60: a must not expire it on its old expiry.
  EXPECT_TRUE(a.TakeExpired().empty());
  EXPECT_EQ((*a.Get(alice, id))["ttl_s"], 60);
  ASSERT_TRUE(a.Renew(alice, id, R"({"ttl_s": 1})").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  std::vector<std::string> from_a, from_b;
  std::thread t([&] { from_b = b.TakeExpired(); });
  from_a = a.TakeExpired();
  t.join();
  EXPECT_EQ(from_a.size() + from_b.size(), 1u);
  EXPECT_EQ(a.Get(alice, id).status().code(), Code::kNotFound);
  EXPECT_EQ(b.Get(alice, id).status().code(), Code::kNotFound);
  // Released through one: gone on the other.
  auto second = b.Create(alice, "");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(a.Release(alice, (*second)["id"]).ok());
  EXPECT_EQ(b.Get(alice, (*second)["id"]).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace warren::server
