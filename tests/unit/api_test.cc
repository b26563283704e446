// The API server's actions against a fake node (fake_node.h) and a real SQLite store: the
// sandbox life cycle and its records, what a node failure leaves (nothing, and a 500), quotas
// given back, metrics without reading records, and a trajectory replayed into a new sandbox.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>

#include "fake_node.h"
#include "image/tar_extract.h"
#include "server/routes.h"

namespace warren::server {
namespace {

using nlohmann::json;

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir_), nullptr);
    state_ = std::move(*StateStore::Open(std::string(dir_) + "/state.db"));
    durable_ = std::move(*StateStore::Open(std::string(dir_) + "/state.db", /*durable=*/true));
    layers_ = std::make_unique<image::LayerStore>(std::string(dir_) + "/store");
    ASSERT_TRUE(layers_->Init().ok());
    ASSERT_TRUE(
        state_->PutLayer({"py", "1", "sha256:" + std::string(64, 'a'), "base", "t", "tar", 10})
            .ok());
    tokens_ = std::make_unique<TokenRegistry>(state_.get(), "secret");
    api_ =
        std::make_unique<Api>(state_.get(), durable_.get(), &fleet_, layers_.get(), tokens_.get());
  }
  void TearDown() override {
    api_.reset();
    tokens_.reset();
    layers_.reset();
    durable_.reset();
    state_.reset();
    (void)image::RemoveTree(dir_);
  }

  json Create(const json& spec, const Principal& who) {
    auto r = api_->CreateSandbox(who, spec.dump());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : json();
  }
  json Exec(const std::string& id, const std::vector<std::string>& argv, const Principal& who,
            int step = -1) {
    json req = {{"argv", argv}};
    if (step >= 0) req["step"] = step;
    auto r = api_->StartExec(who, id, req.dump());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return json();
    EXPECT_TRUE(r->rec->WaitDone(10000));
    return r->rec->ResultJson();
  }

  char dir_[32] = "/tmp/warren-apitest-XXXXXX";
  testing::FakeNode node_;
  node::SingleNodeFleet fleet_{&node_};
  std::unique_ptr<StateStore> state_, durable_;
  std::unique_ptr<image::LayerStore> layers_;
  std::unique_ptr<TokenRegistry> tokens_;
  std::unique_ptr<Api> api_;
  const Principal admin_{"admin", {"admin"}, {}};
  const Principal alice_{"alice", {"sandbox:*", "exec"}, {2, 4, 4096}};
};

TEST_F(ApiTest, ASandboxLivesAndGoesThroughItsRecord) {
  json sb = Create({{"image", "py:1"}, {"labels", {{"job", "a"}}}}, alice_);
  const std::string id = sb["id"];
  EXPECT_EQ(sb["state"], "running");
  EXPECT_EQ(sb["owner"], "alice");
  EXPECT_EQ(sb["layers"][0]["digest"], "sha256:" + std::string(64, 'a'));
  ASSERT_EQ(node_.sandboxes.count(id), 1u);
  EXPECT_EQ(node_.sandboxes[id].spec.config.memory_bytes, 512ull << 20);
  // Another principal does not see it.
  EXPECT_EQ(api_->GetSandbox(Principal{"bob", {"sandbox:*"}, {}}, id).status().code(),
            Code::kNotFound);
  // Pause, a repeated pause, an exec refused while paused, resume.
  EXPECT_EQ((*api_->SetPaused(alice_, id, true))["state"], "paused");
  EXPECT_EQ((*api_->SetPaused(alice_, id, true))["state"], "paused");
  EXPECT_TRUE(node_.sandboxes[id].paused);
  EXPECT_EQ(api_->StartExec(alice_, id, R"({"argv": ["hostname"]})").status().code(),
            Code::kConflict);
  EXPECT_EQ((*api_->SetPaused(alice_, id, false))["state"], "running");
  EXPECT_EQ(Exec(id, {"hostname"}, alice_)["stdout"], id + "\n");
  // Listing by label and by state.
  auto list = api_->ListSandboxes(alice_, {{"label", "job=a"}, {"state", "running"}});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["sandboxes"].size(), 1u);
  EXPECT_EQ(api_->ListSandboxes(alice_, {{"state", "bogus"}}).status().code(), Code::kInvalid);
  ASSERT_TRUE(api_->DeleteSandbox(alice_, id).ok());
  EXPECT_TRUE(node_.deleted.count(id));
  EXPECT_EQ(api_->GetSandbox(alice_, id).status().code(), Code::kNotFound);
  EXPECT_EQ(tokens_->Authenticate("Bearer secret")->name, "admin");
}

TEST_F(ApiTest, ASandboxsExecHistoryListsItsCommandsWithoutOutput) {
  const std::string id = Create({{"image", "py:1"}}, alice_)["id"];
  Exec(id, {"hostname"}, alice_);
  Exec(id, {"exit", "3"}, alice_);
  auto held = api_->StartExec(alice_, id, R"({"argv": ["hold"], "wait": false})");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto h = api_->ExecHistory(alice_, id);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const json& execs = (*h)["execs"];
  ASSERT_EQ(execs.size(), 3u);
  std::map<std::string, json> by_cmd;
  for (const json& e : execs) {
    EXPECT_FALSE(e.contains("stdout"));
    EXPECT_EQ(e["started_at"].get<std::string>().size(), 24u);  // RFC 3339, milliseconds
    by_cmd[e["argv"][0]] = e;
  }
  EXPECT_EQ(by_cmd["hostname"]["exit_code"], 0);
  EXPECT_EQ(by_cmd["hostname"]["output_bytes"], id.size() + 1);
  EXPECT_EQ(by_cmd["exit"]["exit_code"], 3);
  EXPECT_EQ(by_cmd["hold"]["state"], "running");
  EXPECT_TRUE(by_cmd["hold"]["exit_code"].is_null());
  // Another principal does not see it; a sandbox that is gone has no history.
  EXPECT_EQ(api_->ExecHistory(Principal{"bob", {"sandbox:*"}, {}}, id).status().code(),
            Code::kNotFound);
}

TEST_F(ApiTest, ANodeFailureIsInternalAndLeavesNoRecordAndNoQuota) {
  // A host ENOENT in the node's own work is not the tenant's not_found.
  node_.fail_next["create"] = ErrnoStatus("mount layer", "/var/lib/warren/blobs/x", ENOENT);
  auto r = api_->CreateSandbox(alice_, R"({"image": "py:1"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_TRUE(state_->ListSandboxes().empty());
  // The quota share came back: two sandboxes fit, a third does not.
  Create({{"image", "py:1"}}, alice_);
  json second = Create({{"image", "py:1"}}, alice_);
  EXPECT_EQ(api_->CreateSandbox(alice_, R"({"image": "py:1"})").status().code(), Code::kQuota);
  // A delete the node fails keeps the sandbox as it was (running), not stopping.
  node_.fail_next["delete"] = ErrnoStatus("kill cgroup", "/sys/fs/cgroup/x", EBUSY);
  const std::string id = second["id"];
  EXPECT_EQ(api_->DeleteSandbox(alice_, id).code(), Code::kInternal);
  EXPECT_EQ((*api_->GetSandbox(alice_, id))["state"], "running");
  ASSERT_TRUE(api_->DeleteSandbox(alice_, id).ok());
}

TEST_F(ApiTest, OneNodeTakesASelectorOfItsNameAndRefusesOthers) {
  json sb = Create({{"image", "py:1"}, {"node_selector", {{"warren.node", node_.name()}}}}, alice_);
  EXPECT_EQ(sb["node"], node_.name());
  EXPECT_EQ(sb["node_selector"]["warren.node"], node_.name());
  auto r = api_->CreateSandbox(alice_, R"({"image": "py:1", "node_selector": {"gpu": "h100"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalid);
  EXPECT_NE(r.status().message().find("node_selector"), std::string::npos);
  EXPECT_EQ(state_->ListSandboxes().size(), 1u);  // nothing left of the refused one
}

TEST_F(ApiTest, ALostSandboxFailsAndMetricsCountWithoutReadingRecords) {
  const std::string a = Create({{"image", "py:1"}}, admin_)["id"];
  const std::string b = Create({{"image", "py:1"}}, admin_)["id"];
  ASSERT_TRUE(api_->SetPaused(admin_, b, true).ok());
  node_.Lose(a);
  json lost = *api_->GetSandbox(admin_, a);
  EXPECT_EQ(lost["state"], "failed");
  EXPECT_EQ(lost["error"]["code"], "internal");
  // Failed is final: no resume, no pause.
  EXPECT_EQ(api_->SetPaused(admin_, a, true).status().code(), Code::kConflict);
  // Records in the store that do not parse are not counted (nor read): the counts come from
  // the table, kept as records change.
  ASSERT_TRUE(
      state_->PutSandbox({{"id", "sb-junk"}, {"state", "running"}, {"created_at", "x"}}).ok());
  const int info_before = node_.info_calls;
  const std::string m = api_->Metrics();
  EXPECT_NE(m.find("warren_sandboxes{backend=\"container\",state=\"failed\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("warren_sandboxes{backend=\"container\",state=\"paused\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("warren_sandboxes{backend=\"container\",state=\"running\"} 0\n"),
            std::string::npos)
      << m;
  EXPECT_EQ(node_.info_calls - info_before, 1) << "a scrape asks the node once";
}

TEST_F(ApiTest, AReplayIntoANewSandboxRebuildsItsFiles) {
  json spec = {{"image", "py:1"}, {"trajectory", "t1"}};
  const std::string first = Create(spec, alice_)["id"];
  EXPECT_EQ(Exec(first, {"append", "/log", "a"}, alice_)["stdout"], "a");
  EXPECT_EQ(Exec(first, {"hostname"}, alice_)["stdout"], first + "\n");
  ASSERT_TRUE(api_->DeleteSandbox(alice_, first).ok());

  const std::string second = Create(spec, alice_)["id"];
  ASSERT_NE(second, first);
  const int ran = node_.execs_run;
  json r0 = Exec(second, {"append", "/log", "a"}, alice_);
  EXPECT_EQ(r0["replayed"], true);
  EXPECT_FALSE(r0.contains("diverged")) << r0;
  EXPECT_EQ(node_.File(second, "/log"), "a");  // re-ran: the file is there
  json r1 = Exec(second, {"hostname"}, alice_);
  EXPECT_EQ(r1["stdout"], first + "\n");  // the record
  EXPECT_EQ(r1["diverged"], true);
  EXPECT_EQ(r1["differs"], json::array({"stdout"}));
  EXPECT_EQ(r1["rerun"]["stdout"], second + "\n");
  EXPECT_EQ(node_.execs_run - ran, 2);
  // Repeated again in the same sandbox: replayed without a third run.
  EXPECT_EQ(Exec(second, {"append", "/log", "a"}, alice_, /*step=*/0)["replayed"], true);
  EXPECT_EQ(node_.execs_run - ran, 2);
  EXPECT_EQ(node_.File(second, "/log"), "a");
  // The next step runs for real, in the rebuilt state.
  json r2 = Exec(second, {"append", "/log", "b"}, alice_);
  EXPECT_EQ(r2["replayed"], false);
  EXPECT_EQ(r2["stdout"], "ab");
}

TEST_F(ApiTest, StopOnDivergenceAnswersTheRerunAndRefusesMore) {
  json spec = {{"image", "py:1"}, {"trajectory", "t2"}, {"on_divergence", "stop"}};
  const std::string first = Create(spec, alice_)["id"];
  Exec(first, {"hostname"}, alice_);
  ASSERT_TRUE(api_->DeleteSandbox(alice_, first).ok());
  const std::string second = Create(spec, alice_)["id"];
  json r = Exec(second, {"hostname"}, alice_);
  EXPECT_EQ(r["replayed"], false);
  EXPECT_EQ(r["stdout"], second + "\n");
  EXPECT_EQ(r["recorded"]["stdout"], first + "\n");
  auto next = api_->StartExec(alice_, second, R"({"argv": ["exit", "0"]})");
  EXPECT_EQ(next.status().code(), Code::kConflict);
  EXPECT_NE(next.status().ToString().find("stopped at step 0"), std::string::npos)
      << next.status().ToString();
  EXPECT_TRUE((*api_->GetSandbox(alice_, second)).contains("replay_stopped"));
}

}  // namespace
}  // namespace warren::server

namespace warren::server {
namespace {

// Two nodes behind the fleet seam, as a cluster API server has them: placement alternates,
// every later operation goes to the node the record names, a node out of reach makes its
// sandboxes unavailable (and only those), and room is given back when a sandbox goes or its
// create fails.
class TwoNodeFleet : public node::Fleet {
 public:
  int CreatesAtOnce() const override { return 4; }
  Result<std::string> Place(const node::PlacementAsk& ask) override {
    if (full) return Status(Code::kQuota, "place sandbox", "", "every node is full");
    const std::string name = (placed++ % 2 == 0) ? "a" : "b";
    held[name] += ask.memory_mb;
    return name;
  }
  void Release(const std::string& name, const node::PlacementAsk& ask) override {
    held[name] -= ask.memory_mb;
  }
  bool Abandon(const std::string&) override { return false; }
  Result<node::NodeApi*> Node(const std::string& name) override {
    if (down.count(name))
      return Status(Code::kUnavailable, "reach node", name, "the sandbox's node is out of reach");
    if (name == "a") return static_cast<node::NodeApi*>(&a);
    if (name == "b") return static_cast<node::NodeApi*>(&b);
    return Status(Code::kUnavailable, "reach node", name, "no such node");
  }
  Status SetNodeAdmin(const std::string& name, bool cordoned, bool draining) override {
    if (name != "a" && name != "b") return NotFound("node", name);
    admin[name] = {cordoned || draining, draining};
    return Status::Ok();
  }
  std::map<std::string, std::pair<bool, bool>> admin;
  std::vector<json> Infos() override { return {a.Info(), b.Info()}; }
  void SetOnSandboxLost(node::SandboxLostFn lost) override {
    a.SetOnSandboxLost(lost);
    b.SetOnSandboxLost(lost);
  }
  void SetOnNodeLost(std::function<void(const std::string&, const std::string&)> fn) override {
    node_lost = std::move(fn);
  }
  // The node stops heartbeating: out of reach, and the fleet says so.
  void LoseNode(const std::string& name) {
    down.insert(name);
    node_lost(name, "node " + name + " stopped heartbeating");
  }
  std::function<void(const std::string&, const std::string&)> node_lost;

  testing::FakeNode a, b;
  int placed = 0;
  bool full = false;
  std::set<std::string> down;
  std::map<std::string, int64_t> held;
};

TEST_F(ApiTest, EachSandboxIsServedByTheNodeItsRecordNames) {
  TwoNodeFleet fleet;
  api_.reset();
  api_ = std::make_unique<Api>(state_.get(), durable_.get(), &fleet, layers_.get(), tokens_.get());
  const std::string on_a = Create({{"image", "py:1"}, {"memory_mb", 100}}, admin_)["id"];
  json second = Create({{"image", "py:1"}, {"memory_mb", 100}}, admin_);
  const std::string on_b = second["id"];
  EXPECT_EQ(second["node"], "b");
  EXPECT_TRUE(fleet.a.sandboxes.count(on_a));
  EXPECT_TRUE(fleet.b.sandboxes.count(on_b));
  EXPECT_FALSE(fleet.a.sandboxes.count(on_b));
  EXPECT_EQ(fleet.held["a"], 100);

  EXPECT_EQ(Exec(on_b, {"exit", "0"}, admin_)["exit_code"], 0);
  EXPECT_EQ(fleet.b.execs_run, 1);
  EXPECT_EQ(fleet.a.execs_run, 0);
  EXPECT_EQ(api_->Nodes()["nodes"].size(), 2u);

  // b out of reach: its sandbox is unavailable, a's is not.
  fleet.down.insert("b");
  EXPECT_EQ(api_->StartExec(admin_, on_b, R"({"argv": ["true"]})").status().code(),
            Code::kUnavailable);
  EXPECT_EQ(api_->DeleteSandbox(admin_, on_b).code(), Code::kUnavailable);
  EXPECT_EQ((*api_->GetSandbox(admin_, on_b))["state"], "running");  // the delete changed nothing
  EXPECT_EQ(Exec(on_a, {"exit", "0"}, admin_)["exit_code"], 0);
  fleet.down.clear();

  // Deletion gives the room back on the right node.
  ASSERT_TRUE(api_->DeleteSandbox(admin_, on_a).ok());
  EXPECT_FALSE(fleet.a.sandboxes.count(on_a));
  EXPECT_EQ(fleet.held["a"], 0);
  EXPECT_EQ(fleet.held["b"], 100);

  // A sandbox whose agent died gives its room back when it fails, not again when deleted.
  fleet.b.Lose(on_b);
  EXPECT_EQ((*api_->GetSandbox(admin_, on_b))["state"], "failed");
  EXPECT_EQ(fleet.held["b"], 0);
  ASSERT_TRUE(api_->DeleteSandbox(admin_, on_b).ok());
  EXPECT_EQ(fleet.held["b"], 0);

  // A create the node refuses holds no room; a full fleet is a quota error.
  fleet.a.fail_next["create"] = Status(Code::kInternal, "mount", "x", "boom");
  EXPECT_FALSE(api_->CreateSandbox(admin_, R"({"image": "py:1", "memory_mb": 100})").ok());
  EXPECT_EQ(fleet.held["a"], 0);
  fleet.full = true;
  EXPECT_EQ(api_->CreateSandbox(admin_, R"({"image": "py:1"})").status().code(), Code::kQuota);
  api_.reset();
}

// A node that leaves while a sandbox is being made on it: the sandbox is lost (its room given
// back then), and the create that then fails gives nothing back a second time, whether the
// node's create failed or succeeded.
TEST_F(ApiTest, ANodeLostMidCreateGivesTheRoomBackOnce) {
  TwoNodeFleet fleet;
  api_.reset();
  api_ = std::make_unique<Api>(state_.get(), durable_.get(), &fleet, layers_.get(), tokens_.get());
  const std::string keep = Create({{"image", "py:1"}, {"memory_mb", 100}}, admin_)["id"];  // on a
  Create({{"image", "py:1"}, {"memory_mb", 100}}, admin_);                                 // on b
  EXPECT_EQ(fleet.held["a"], 100);

  // a's next create: the node leaves meanwhile, and then the create fails there.
  fleet.a.during_create = [&](const std::string&) {
    fleet.a.during_create = nullptr;
    fleet.LoseNode("a");
    fleet.a.fail_next["create"] = Status(Code::kUnavailable, "reach node", "a", "gone");
  };
  EXPECT_FALSE(api_->CreateSandbox(admin_, R"({"image": "py:1", "memory_mb": 100})").ok());
  // Both of a's sandboxes were lost and gave their room back, once each.
  EXPECT_EQ(fleet.held["a"], 0);
  EXPECT_EQ((*api_->GetSandbox(admin_, keep))["state"], "lost");

  // b's next: it leaves while the create succeeds there; the move to running is refused.
  fleet.b.during_create = [&](const std::string&) {
    fleet.b.during_create = nullptr;
    fleet.LoseNode("b");
  };
  fleet.placed = 1;  // the next goes to b
  auto made = api_->CreateSandbox(admin_, R"({"image": "py:1", "memory_mb": 100})");
  EXPECT_FALSE(made.ok());
  EXPECT_EQ(fleet.held["b"], 0);
  api_.reset();
}

TEST_F(ApiTest, ASandboxOfANodeThatLeftIsLostWithAReason) {
  TwoNodeFleet fleet;
  api_.reset();
  api_ = std::make_unique<Api>(state_.get(), durable_.get(), &fleet, layers_.get(), tokens_.get());
  const std::string on_a = Create({{"image", "py:1"}, {"memory_mb", 100}}, alice_)["id"];
  const std::string on_b = Create({{"image", "py:1"}, {"memory_mb", 100}}, alice_)["id"];
  // alice's quota (2 sandboxes) is full.
  EXPECT_EQ(api_->CreateSandbox(alice_, R"({"image": "py:1"})").status().code(), Code::kQuota);

  fleet.LoseNode("b");
  json lost = *api_->GetSandbox(alice_, on_b);
  EXPECT_EQ(lost["state"], "lost");
  EXPECT_EQ(lost["reason"], "node b stopped heartbeating");
  EXPECT_EQ((*api_->GetSandbox(alice_, on_a))["state"], "running");
  EXPECT_EQ(fleet.held["b"], 0);
  EXPECT_NE(api_->Metrics().find("state=\"lost\"} 1"), std::string::npos);
  // Its share is back: alice can make another (placement alternates: it goes to a).
  fleet.placed = 0;
  const std::string again = Create({{"image", "py:1"}, {"memory_mb", 100}}, alice_)["id"];
  EXPECT_EQ(api_->StartExec(alice_, on_b, R"({"argv": ["exit", "0"]})").status().code(),
            Code::kConflict);
  // Deleted while its node is still gone: the record goes, nothing is given back twice.
  ASSERT_TRUE(api_->DeleteSandbox(alice_, on_b).ok());
  EXPECT_EQ(api_->GetSandbox(alice_, on_b).status().code(), Code::kNotFound);
  EXPECT_EQ(fleet.held["b"], 0);
  EXPECT_EQ(fleet.held["a"], 200);
  // The stored record with `reason` reads back (a restarted API server).
  ASSERT_TRUE(api_->DeleteSandbox(alice_, again).ok());
  // A lease holder is told: the renewal's answer lists its sandboxes that were lost.
  auto lease = api_->CreateLease(alice_, R"({"ttl_s": 60})");
  ASSERT_TRUE(lease.ok());
  const std::string lid = (*lease)["id"];
  EXPECT_FALSE(lease->contains("lost"));
  fleet.down.clear();
  fleet.placed = 1;  // the next goes to b
  const std::string leased =
      Create({{"image", "py:1"}, {"memory_mb", 100}, {"lease", lid}}, alice_)["id"];
  EXPECT_EQ((*api_->GetSandbox(alice_, leased))["node"], "b");
  fleet.LoseNode("b");
  auto renewed = api_->RenewLease(alice_, lid, "");
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ((*renewed)["lost"], json::array({leased}));
  ASSERT_TRUE(api_->DeleteSandbox(alice_, leased).ok());
  api_.reset();
}

TEST_F(ApiTest, DrainDeletesANodesSandboxesAndCordonKeepsThem) {
  TwoNodeFleet fleet;
  api_.reset();
  api_ = std::make_unique<Api>(state_.get(), durable_.get(), &fleet, layers_.get(), tokens_.get());
  const std::string on_a = Create({{"image", "py:1"}, {"memory_mb", 100}}, alice_)["id"];
  const std::string on_b = Create({{"image", "py:1"}, {"memory_mb", 100}}, alice_)["id"];
  auto cordoned = api_->SetNodeAdmin("a", Api::NodeAdmin::kCordon);
  ASSERT_TRUE(cordoned.ok()) << cordoned.status().ToString();
  EXPECT_EQ((*cordoned)["state"], "cordoned");
  EXPECT_EQ(fleet.admin["a"], std::make_pair(true, false));
  EXPECT_EQ((*api_->GetSandbox(alice_, on_a))["state"], "running");  // cordon deletes nothing

  auto drained = api_->SetNodeAdmin("b", Api::NodeAdmin::kDrain);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ((*drained)["deleted"], 1);
  EXPECT_TRUE((*drained)["errors"].empty());
  EXPECT_EQ(fleet.admin["b"], std::make_pair(true, true));
  EXPECT_EQ(api_->GetSandbox(alice_, on_b).status().code(), Code::kNotFound);
  EXPECT_FALSE(fleet.b.sandboxes.count(on_b));
  EXPECT_EQ(fleet.held["b"], 0);  // its room, and alice's share, are back
  EXPECT_EQ((*api_->GetSandbox(alice_, on_a))["state"], "running");

  ASSERT_TRUE(api_->SetNodeAdmin("b", Api::NodeAdmin::kUncordon).ok());
  EXPECT_EQ(fleet.admin["b"], std::make_pair(false, false));
  EXPECT_EQ(api_->SetNodeAdmin("zz", Api::NodeAdmin::kCordon).status().code(), Code::kNotFound);
  ASSERT_TRUE(api_->DeleteSandbox(alice_, on_a).ok());
  api_.reset();
}

TEST_F(ApiTest, WarrenServeHasNoNodeToCordon) {
  auto st = api_->SetNodeAdmin("local", Api::NodeAdmin::kDrain);
  EXPECT_EQ(st.status().code(), Code::kInvalid);
  EXPECT_NE(st.status().ToString().find("cluster"), std::string::npos);
}

TEST_F(ApiTest, AForkMakesItsChildrenFromOneSnapshotAndRecordsTheirLineage) {
  const std::string parent = Create({{"image", "py:1"}, {"labels", {{"job", "f"}}}}, admin_)["id"];
  // The tag moves after the parent was made: its children still get the parent's base, which
  // the snapshot is a difference from.
  ASSERT_TRUE(
      state_->PutLayer({"py", "1", "sha256:" + std::string(64, 'e'), "base", "t", "tar", 10}).ok());
  auto forked = api_->Fork(admin_, parent, R"({"count": 3})");
  ASSERT_TRUE(forked.ok()) << forked.status().ToString();
  ASSERT_EQ(node_.snapshots.size(), 1u);  // one moment, however many children
  EXPECT_EQ(node_.snapshots[0].first, parent);
  EXPECT_EQ(node_.snapshots[0].second.workspace, "");  // the parent had none
  const std::string digest = (*forked)["snapshot"]["digest"];
  ASSERT_EQ((*forked)["sandboxes"].size(), 3u);
  std::set<std::string> ids;
  for (const json& c : (*forked)["sandboxes"]) {
    const std::string id = c["id"];
    ids.insert(id);
    EXPECT_EQ(c["state"], "running");
    EXPECT_EQ(c["lineage"]["parent"], parent);
    EXPECT_EQ(c["lineage"]["snapshot"]["digest"], digest);
    EXPECT_EQ(c["labels"]["job"], "f");  // the parent's spec
    // Its workspace is the snapshot, over the parent's own layers.
    const auto& layers = node_.sandboxes[id].spec.config.layers;
    ASSERT_EQ(layers.size(), 2u);
    EXPECT_EQ(layers[0].digest, digest);
    EXPECT_EQ(c["layers"][0]["role"], "workspace");
    EXPECT_EQ(c["layers"][1]["digest"], "sha256:" + std::string(64, 'a'));
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ((*api_->GetSandbox(admin_, parent))["state"], "running");
  auto kids = api_->ListSandboxes(admin_, {{"parent", parent}});
  ASSERT_TRUE(kids.ok());
  EXPECT_EQ((*kids)["sandboxes"].size(), 3u);
  // A child's fork stacks: its snapshot has the child's workspace (the first one) under it.
  const std::string child = *ids.begin();
  ASSERT_TRUE(api_->Fork(admin_, child, R"({"count": 1})").ok());
  ASSERT_EQ(node_.snapshots.size(), 2u);
  EXPECT_EQ(node_.snapshots[1].second.workspace, digest);
}

TEST_F(ApiTest, AMicrovmForksWithItsMemoryOverExactlyItsLayers) {
  node_.memory_forks = true;
  const std::string parent = Create({{"image", "py:1"}, {"backend", "microvm"}}, admin_)["id"];
  auto forked = api_->Fork(admin_, parent, R"({"count": 3})");
  ASSERT_TRUE(forked.ok()) << forked.status().ToString();
  EXPECT_TRUE(node_.snapshots.empty());  // its files are in the memory the children restore
  ASSERT_EQ(node_.prepared_forks, std::vector<std::string>{parent});  // one capture for all
  EXPECT_EQ(node_.ended_forks, std::vector<std::string>{testing::FakeNode::ForkToken(1)});
  EXPECT_FALSE(forked->contains("snapshot"));
  EXPECT_EQ((*forked)["memory"]["ram_bytes"], 1 << 20);
  ASSERT_EQ((*forked)["sandboxes"].size(), 3u);
  for (const json& c : (*forked)["sandboxes"]) {
    EXPECT_EQ(c["lineage"], json({{"parent", parent}, {"memory", true}}));
    const auto& spec = node_.sandboxes[c["id"]].spec;
    EXPECT_EQ(spec.fork, testing::FakeNode::ForkToken(1));
    ASSERT_EQ(spec.config.layers.size(), 1u);  // the parent's base, no snapshot over it
    EXPECT_EQ(spec.config.layers[0].digest, "sha256:" + std::string(64, 'a'));
  }
  // Named too: one snapshot for the tag (the fake's blob is in no store, so naming it fails,
  // and the capture still ends).
  auto named = api_->Fork(admin_, parent, R"({"count": 1, "tag": "kept:1"})");
  EXPECT_FALSE(named.ok());
  EXPECT_EQ(node_.snapshots.size(), 1u);
  EXPECT_EQ(node_.ended_forks.size(), 2u);
  // A container never asks for memory; a node that cannot forks the microVM's files.
  const std::string box = Create({{"image", "py:1"}}, admin_)["id"];
  ASSERT_TRUE(api_->Fork(admin_, box, R"({"count": 1})").ok());
  EXPECT_EQ(node_.prepared_forks.size(), 2u);
  node_.memory_forks = false;
  auto files = api_->Fork(admin_, parent, R"({"count": 1})");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ((*files)["sandboxes"][0]["lineage"]["memory"], false);
  EXPECT_TRUE((*files)["memory"].is_null());
}

TEST_F(ApiTest, AMemoryForkThatFailsRemovesItsChildrenAndEndsTheCapture) {
  node_.memory_forks = true;
  const std::string parent = Create({{"image", "py:1"}, {"backend", "microvm"}}, admin_)["id"];
  std::atomic<int> creates{0};
  node_.during_create = [&](const std::string&) {
    std::lock_guard lock(node_.mu);  // the creates run in parallel
    if (++creates == 2) node_.fail_next["create"] = Status(Code::kInternal, "restore", "vm", "x");
  };
  auto forked = api_->Fork(admin_, parent, R"({"count": 3})");
  ASSERT_FALSE(forked.ok());
  EXPECT_EQ(node_.ended_forks.size(), 1u);
  auto kids = api_->ListSandboxes(admin_, {{"parent", parent}});
  ASSERT_TRUE(kids.ok());
  EXPECT_TRUE((*kids)["sandboxes"].empty());
  EXPECT_EQ(node_.sandboxes.size(), 1u);  // the parent alone
}

TEST_F(ApiTest, AForkIsAllOrNone) {
  const std::string parent = Create({{"image", "py:1"}}, alice_)["id"];
  // alice may have 2 sandboxes: the parent and one more. A fork of 2 makes nothing, not
  // even its snapshot.
  auto over = api_->Fork(alice_, parent, R"({"count": 2})");
  ASSERT_EQ(over.status().code(), Code::kQuota) << over.status().ToString();
  EXPECT_NE(over.status().ToString().find("fork of 2"), std::string::npos);
  EXPECT_TRUE(node_.snapshots.empty());
  EXPECT_EQ(state_->ListSandboxes().size(), 1u);
  // The shares came back: a fork of 1 fits.
  ASSERT_TRUE(api_->Fork(alice_, parent, R"({"count": 1})").ok());
  // A create that fails takes the children already made with it.
  const std::string p2 = Create({{"image", "py:1"}}, admin_)["id"];
  const size_t before = state_->ListSandboxes().size();
  node_.fail_next["create"] = Status(Code::kUnavailable, "create sandbox", "x", "no room");
  auto failed = api_->Fork(admin_, p2, R"({"count": 4})");
  ASSERT_EQ(failed.status().code(), Code::kUnavailable) << failed.status().ToString();
  EXPECT_NE(failed.status().ToString().find("removed"), std::string::npos);
  EXPECT_EQ(state_->ListSandboxes().size(), before);
  EXPECT_EQ(node_.sandboxes.size(), before);
}

TEST_F(ApiTest, ForksAndSnapshotsRefuseWhatTheyCannotDo) {
  const std::string id = Create({{"image", "py:1"}}, alice_)["id"];
  // Another principal's sandbox does not exist for it.
  EXPECT_EQ(api_->Fork(Principal{"bob", {"sandbox:*"}, {}}, id, R"({"count": 1})").status().code(),
            Code::kNotFound);
  for (const char* bad : {R"({"count": 0})", R"({"count": 1001})", R"({"count": "2"})",
                          R"({"count": 1, "image": "x:y"})", R"({})", R"([1])"})
    EXPECT_EQ(api_->Fork(alice_, id, bad).status().code(), Code::kInvalid) << bad;
  // Naming the snapshot makes a layer: image:write.
  EXPECT_EQ(api_->Fork(alice_, id, R"({"count": 1, "tag": "s:1"})").status().code(),
            Code::kForbidden);
  EXPECT_EQ(api_->Snapshot(alice_, id, R"({"tag": "s:1"})").status().code(), Code::kForbidden);
  ASSERT_TRUE(api_->SetPaused(alice_, id, true).ok());
  auto paused = api_->Fork(alice_, id, R"({"count": 1})");
  EXPECT_EQ(paused.status().code(), Code::kConflict);
  EXPECT_NE(paused.status().ToString().find("resume"), std::string::npos);
  EXPECT_TRUE(node_.snapshots.empty());
  for (const char* bad : {R"({})", R"({"tag": "no tag"})", R"({"tag": "s:1", "max_mb": 0})",
                          R"({"tag": "s:1", "extra": 1})"})
    EXPECT_EQ(api_->Snapshot(admin_, id, bad).status().code(), Code::kInvalid) << bad;
}

TEST_F(ApiTest, ASnapshotIsNamedOnlyOnceItsBlobIsInTheStore) {
  const std::string id = Create({{"image", "py:1"}}, admin_)["id"];
  // The fake node's first snapshot: sha256:0...01, which this store does not hold.
  auto missing = api_->Snapshot(admin_, id, R"({"tag": "s:1"})");
  EXPECT_EQ(missing.status().code(), Code::kInternal);
  EXPECT_FALSE(state_->GetLayer("s", "1").ok());
  const std::string second = "sha256:" + std::string(63, '0') + "2";
  {
    FILE* f = fopen(layers_->BlobPath(second).c_str(), "w");
    ASSERT_NE(f, nullptr);
    fclose(f);
  }
  auto named = api_->Snapshot(admin_, id, R"({"tag": "s:1", "max_mb": 5})");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ((*named)["digest"], second);
  EXPECT_EQ((*named)["kind"], "workspace");
  EXPECT_EQ((*named)["snapshot"]["sandbox"], id);
  EXPECT_EQ(node_.snapshots.back().second.max_bytes, 5ull << 20);
  EXPECT_EQ(state_->GetLayer("s", "1")->digest, second);
}

TEST(SandboxRecord, ReasonGoesWithLostOnly) {
  SandboxRecord r;
  r.id = "sb-1";
  r.owner = "o";
  r.node = "n";
  r.created_at = "2026-12-02T00:00:00Z";
  r.state = SandboxState::kLost;
  r.reason = "node n stopped heartbeating";
  r.spec.image = "py:1";
  auto back = ParseSandboxRecord(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->reason, r.reason);
  json no_reason = ToJson(r);
  no_reason.erase("reason");
  EXPECT_FALSE(ParseSandboxRecord(no_reason).ok());
  json running = ToJson(r);
  running["state"] = "running";
  EXPECT_FALSE(ParseSandboxRecord(running).ok());
  EXPECT_TRUE(CanMove(SandboxState::kLost, SandboxState::kRunning));
  EXPECT_FALSE(CanMove(SandboxState::kFailed, SandboxState::kLost));
}

TEST(SandboxRecord, LineageRoundTripsAndIsParsedStrictly) {
  SandboxRecord r;
  r.id = "sb-2";
  r.owner = "o";
  r.node = "n";
  r.created_at = "2026-12-02T00:00:00Z";
  r.state = SandboxState::kRunning;
  r.spec.image = "py:1";
  r.lineage = SandboxRecord::Lineage{"sb-1", "sha256:" + std::string(64, 'b'), "snap:1"};
  auto back = ParseSandboxRecord(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->lineage.has_value());
  EXPECT_EQ(back->lineage->parent, "sb-1");
  EXPECT_EQ(back->lineage->snapshot_ref, "snap:1");
  json bad = ToJson(r);
  bad["lineage"]["extra"] = 1;
  EXPECT_FALSE(ParseSandboxRecord(bad).ok());
  bad = ToJson(r);
  bad["lineage"]["snapshot"] = "sha256:x";
  EXPECT_FALSE(ParseSandboxRecord(bad).ok());
  // A memory fork that was not named has no snapshot; a lineage with neither is refused.
  r.lineage = SandboxRecord::Lineage{"sb-1", "", "", true};
  back = ParseSandboxRecord(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->lineage->memory);
  EXPECT_FALSE(ToJson(r)["lineage"].contains("snapshot"));
  bad = ToJson(r);
  bad["lineage"]["memory"] = false;
  EXPECT_FALSE(ParseSandboxRecord(bad).ok());
}

}  // namespace
}  // namespace warren::server
