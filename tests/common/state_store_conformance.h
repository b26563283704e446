// What the API relies on from a StateStore, as one suite run against each store: SQLite and
// the etcd store over MemKv in the unit tests, the etcd store over a real etcd in the cluster
// tests. Names are unique per test (the real etcd is shared by the whole binary), and lists are
// read as "ours among others". Include once per test binary, then instantiate:
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StateStoreConformance, testing::Values(StateTarget{...}));
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/state_store.h"

namespace warren::server {

struct StateTarget {
  std::string name;
  // A fresh store; its backing (a file, a KvStore) lives as long as the holder.
  std::function<std::shared_ptr<StateStore>()> make;
};

inline std::ostream& operator<<(std::ostream& os, const StateTarget& t) { return os << t.name; }

class StateStoreConformance : public ::testing::TestWithParam<StateTarget> {
 protected:
  void SetUp() override {
    store_ = GetParam().make();
    ASSERT_NE(store_, nullptr);
    u_ = std::to_string(std::random_device{}());
  }
  // The ids in `docs` that start with this test's unique part, in order.
  std::vector<std::string> Ours(const std::vector<nlohmann::json>& docs, const char* field) {
    std::vector<std::string> out;
    for (const auto& d : docs) {
      const std::string id = d.value(field, "");
      if (id.rfind(u_, 0) == 0) out.push_back(id.substr(u_.size()));
    }
    return out;
  }
  std::shared_ptr<StateStore> store_;
  std::string u_;
};

TEST_P(StateStoreConformance, SandboxesByIdListedByCreation) {
  StateStore& s = *store_;
  ASSERT_TRUE(s.PutSandbox({{"id", u_ + "b"}, {"state", "running"}, {"created_at", "t2"}}).ok());
  ASSERT_TRUE(s.PutSandbox({{"id", u_ + "a"}, {"state", "creating"}, {"created_at", "t3"}}).ok());
  ASSERT_TRUE(s.PutSandbox({{"id", u_ + "c"}, {"state", "running"}, {"created_at", "t1"}}).ok());
  ASSERT_TRUE(s.PutSandbox({{"id", u_ + "a"}, {"state", "running"}, {"created_at", "t3"}}).ok());
  auto a = s.GetSandbox(u_ + "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)["state"], "running");
  EXPECT_EQ(Ours(s.ListSandboxes(), "id"), (std::vector<std::string>{"c", "b", "a"}));
  EXPECT_EQ(s.GetSandbox(u_ + "nope").status().code(), Code::kNotFound);
  ASSERT_TRUE(s.RemoveSandbox(u_ + "b").ok());
  ASSERT_TRUE(s.RemoveSandbox(u_ + "b").ok());  // removing what is gone is no error
  EXPECT_EQ(Ours(s.ListSandboxes(), "id"), (std::vector<std::string>{"c", "a"}));
}

TEST_P(StateStoreConformance, SandboxWritesCompareTheVersionRead) {
  StateStore& s = *store_;
  const std::string id = u_ + "cas";
  const nlohmann::json v1 = {{"id", id}, {"state", "creating"}, {"created_at", "t"}};
  EXPECT_EQ(s.GetSandboxStamped(id).status().code(), Code::kNotFound);
  auto written = s.PutSandboxIf(v1, "");
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(s.PutSandboxIf(v1, "").status().code(), Code::kConflict);  // exists
  auto read = s.GetSandboxStamped(id);
  ASSERT_TRUE(read.ok());
  // The stamp a write returns is the version's: the writer may change it next without a read.
  EXPECT_EQ(*written, read->stamp);
  EXPECT_EQ(read->doc["state"], "creating");
  nlohmann::json v2 = v1, v3 = v1;
  v2["state"] = "running";
  v3["state"] = "failed";
  ASSERT_TRUE(s.PutSandboxIf(v2, read->stamp).ok());
  // A second writer that read the same version loses, and nothing of it is written.
  EXPECT_EQ(s.PutSandboxIf(v3, read->stamp).status().code(), Code::kConflict);
  EXPECT_EQ((*s.GetSandbox(id))["state"], "running");
  auto again = s.GetSandboxStamped(id);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->stamp, read->stamp);
  ASSERT_TRUE(s.RemoveSandbox(id).ok());
  EXPECT_EQ(s.PutSandboxIf(v2, again->stamp).status().code(), Code::kConflict);  // gone meanwhile
}

TEST_P(StateStoreConformance, RemovalComparesTheVersionRead) {
  StateStore& s = *store_;
  const std::string id = u_ + "rm";
  ASSERT_TRUE(s.PutSandboxIf({{"id", id}, {"state", "running"}, {"created_at", "t"}}, "").ok());
  auto read = s.GetSandboxStamped(id);
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(
      s.PutSandboxIf({{"id", id}, {"state", "stopping"}, {"created_at", "t"}}, read->stamp).ok());
  EXPECT_EQ(s.RemoveSandboxIf(id, read->stamp).code(), Code::kConflict);  // changed since
  auto now = s.GetSandboxStamped(id);
  ASSERT_TRUE(now.ok());
  ASSERT_TRUE(s.RemoveSandboxIf(id, now->stamp).ok());
  EXPECT_EQ(s.GetSandbox(id).status().code(), Code::kNotFound);
  // A second remover that read the same version gets nothing: exactly one gives back what
  // the record held.
  EXPECT_EQ(s.RemoveSandboxIf(id, now->stamp).code(), Code::kConflict);
}

// A store that counts shares grants an owner's last slot once, whoever asks, and a record
// gives its share back when it fails or goes; one that does not (SQLite: warren serve counts
// in process) inserts whatever the limits.
TEST_P(StateStoreConformance, SharesAreCheckedWhereRecordsAreInserted) {
  StateStore& s = *store_;
  const std::string owner = u_ + "owner";
  auto rec = [&](const std::string& id, const char* state) {
    return nlohmann::json{{"id", u_ + id},     {"owner", owner}, {"state", state},
                          {"created_at", "t"}, {"cpu", 1.5},     {"memory_mb", 256}};
  };
  const ShareLimits two{2, 0, 0};
  ASSERT_TRUE(s.InsertSandbox(rec("a", "creating"), two).ok());
  ASSERT_TRUE(s.InsertSandbox(rec("b", "running"), two).ok());
  Status third = s.InsertSandbox(rec("c", "creating"), two).status();
  if (!s.CountsShares()) {
    EXPECT_TRUE(third.ok()) << third.ToString();
    return;
  }
  EXPECT_EQ(third.code(), Code::kQuota);
  EXPECT_NE(third.ToString().find("quota of 2 sandboxes"), std::string::npos) << third.ToString();
  EXPECT_EQ(s.GetSandbox(u_ + "c").status().code(), Code::kNotFound);
  auto share = s.ShareOf(owner);
  ASSERT_TRUE(share.ok()) << share.status().ToString();
  EXPECT_EQ(share->sandboxes, 2);
  EXPECT_DOUBLE_EQ(share->cpu, 3.0);
  EXPECT_EQ(share->memory_mb, 512);
  // b fails: its share is back.
  auto b = s.GetSandboxStamped(u_ + "b");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(s.PutSandboxIf(rec("b", "failed"), b->stamp).ok());
  EXPECT_EQ(s.ShareOf(owner)->sandboxes, 1);
  ASSERT_TRUE(s.InsertSandbox(rec("c", "creating"), two).ok());
  EXPECT_EQ(s.InsertSandbox(rec("d", "creating"), two).status().code(), Code::kQuota);
  ASSERT_TRUE(s.RemoveSandbox(u_ + "a").ok());
  EXPECT_EQ(s.ShareOf(owner)->sandboxes, 1);
  // An id that exists is a conflict, not a quota.
  EXPECT_EQ(s.InsertSandbox(rec("c", "creating"), {5, 0, 0}).status().code(), Code::kConflict);

  // Many writers at once for the last slots: exactly as many win as there are slots.
  const std::string many = u_ + "many";
  std::atomic<int> granted{0}, refused{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 8; ++i)
    writers.emplace_back([&, i] {
      nlohmann::json r = {{"id", many + std::to_string(i)},
                          {"owner", many},
                          {"state", "creating"},
                          {"created_at", "t"},
                          {"cpu", 1.0},
                          {"memory_mb", 0}};
      Status st = s.InsertSandbox(r, {3, 0, 0}).status();
      (st.ok() ? granted : refused)++;
      EXPECT_TRUE(st.ok() || st.code() == Code::kQuota) << st.ToString();
    });
  for (auto& t : writers) t.join();
  EXPECT_EQ(granted.load(), 3);
  EXPECT_EQ(refused.load(), 5);
  EXPECT_EQ(s.ShareOf(many)->sandboxes, 3);
}

TEST_P(StateStoreConformance, LayerTagsMoveAndCountTheirDigests) {
  StateStore& s = *store_;
  const std::string name = "lib/" + u_, d1 = "sha256:" + u_ + "1", d2 = "sha256:" + u_ + "2";
  EXPECT_EQ(s.GetLayer(name, "1").status().code(), Code::kNotFound);
  ASSERT_TRUE(s.PutLayer({name, "1", d1, "base", "t", "tar", 10}).ok());
  ASSERT_TRUE(s.PutLayer({name, "2", d1, "base", "t", "tar", 10}).ok());
  EXPECT_EQ(s.LayerRefs(d1), 2);
  EXPECT_EQ(s.GetLayer(name, "1")->digest, d1);
  ASSERT_TRUE(s.PutLayer({name, "1", d2, "tool", "t2", "dir", 20}).ok());  // the tag moves
  auto moved = s.GetLayer(name, "1");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->digest, d2);
  EXPECT_EQ(moved->kind, "tool");
  EXPECT_EQ(moved->size, 20u);
  EXPECT_EQ(s.LayerRefs(d1), 1);
  std::vector<std::string> tags;
  for (const auto& l : s.ListLayers())
    if (l.name == name) tags.push_back(l.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"1", "2"}));
  ASSERT_TRUE(s.RemoveLayer(name, "2").ok());
  EXPECT_EQ(s.RemoveLayer(name, "2").code(), Code::kNotFound);
  EXPECT_EQ(s.LayerRefs(d1), 0);
}

TEST_P(StateStoreConformance, DocsByKindAndId) {
  StateStore& s = *store_;
  const std::string kind = "k" + u_;
  ASSERT_TRUE(s.PutDoc(kind, "b", {{"id", "b"}, {"n", 1}}).ok());
  ASSERT_TRUE(s.PutDoc(kind, "a", {{"id", "a"}}).ok());
  ASSERT_TRUE(s.PutDoc("other" + u_, "a", {{"id", "x"}}).ok());
  ASSERT_TRUE(s.PutDoc(kind, "b", {{"id", "b"}, {"n", 2}}).ok());
  EXPECT_EQ((*s.GetDoc(kind, "b"))["n"], 2);
  auto listed = s.ListDocs(kind);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0]["id"], "a");
  EXPECT_EQ((*listed)[1]["id"], "b");
  EXPECT_EQ(s.GetDoc(kind, "c").status().code(), Code::kNotFound);
  ASSERT_TRUE(s.RemoveDoc(kind, "a").ok());
  EXPECT_EQ(s.RemoveDoc(kind, "a").code(), Code::kNotFound);
  EXPECT_EQ(s.ListDocs(kind)->size(), 1u);
}

TEST_P(StateStoreConformance, TrajectoryStepsInOrderOncePerStep) {
  StateStore& s = *store_;
  // A trajectory key with a slash must not see the steps of one that is its prefix.
  const std::string traj = "p/" + u_, longer = traj + "/x";
  EXPECT_EQ(s.MaxStep(traj), -1);
  for (int64_t step : {0, 2, 10, 1})
    ASSERT_TRUE(s.InsertStep(traj, step, u_ + "e" + std::to_string(step), {{"step", step}}).ok());
  ASSERT_TRUE(s.InsertStep(longer, 99, u_ + "long", {{"step", 99}}).ok());
  EXPECT_EQ(s.InsertStep(traj, 2, u_ + "again", {{"step", 2}}).code(), Code::kConflict);
  EXPECT_EQ(s.MaxStep(traj), 10);
  std::vector<int64_t> steps;
  for (const auto& d : s.ListSteps(traj)) steps.push_back(d["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 10}));
  ASSERT_TRUE(s.UpdateStep(traj, 2, {{"step", 2}, {"rerun", true}}).ok());
  EXPECT_EQ((*s.GetStep(traj, 2))["rerun"], true);
  EXPECT_EQ(s.UpdateStep(traj, 3, {}).code(), Code::kNotFound);
  EXPECT_EQ(s.GetStep(traj, 3).status().code(), Code::kNotFound);
  auto found = s.FindStepByExec(u_ + "e2");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ((*found)["traj"], traj);
  EXPECT_EQ((*found)["doc"]["rerun"], true);
  EXPECT_EQ(s.FindStepByExec(u_ + "none").status().code(), Code::kNotFound);
}

}  // namespace warren::server
