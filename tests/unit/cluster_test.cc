// The cluster's pure parts (records, placement) and its etcd parts (reservations, membership)
// over MemKv. tests/cluster runs the reservation race against a real etcd as well.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cluster/keys.h"
#include "cluster/membership.h"
#include "cluster/placement.h"
#include "cluster/reservation_batcher.h"
#include "cluster/reservations.h"
#include "mem_kv.h"

namespace warren::cluster {
namespace {

using nlohmann::json;
using runtime::BackendKind;

NodeRecord Node(const std::string& name, int64_t cores = 192, int64_t memory_gb = 1536) {
  NodeRecord n;
  n.name = name;
  n.address = "http://127.0.0.1:1";
  n.capacity = {cores * 1000, memory_gb * 1024, 4 << 20};
  n.backends = {BackendKind::kContainer, BackendKind::kFncall};
  n.started_at = "2026-12-02T00:00:00Z";
  return n;
}

PlacementRequest Small() {
  PlacementRequest r;
  r.resources = {1000, 512, 1024};
  return r;
}

TEST(NodeRecord, RoundTripsAndRefusesUnknownFields) {
  NodeRecord n = Node("n1");
  n.labels = {{"zone", "a"}};
  n.layers = {"sha256:aa"};
  n.sandboxes = 3;
  auto back = ParseNodeRecord(ToJson(n));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->capacity, n.capacity);
  EXPECT_EQ(back->labels, n.labels);
  EXPECT_EQ(back->backends, n.backends);
  json extra = ToJson(n);
  extra["surprise"] = 1;
  EXPECT_EQ(ParseNodeRecord(extra).status().code(), Code::kInvalid);
  json bad = ToJson(n);
  bad["backends"] = {"teleporter"};
  EXPECT_FALSE(ParseNodeRecord(bad).ok());
  bad = ToJson(n);
  bad["capacity"]["cpu_milli"] = -1;
  EXPECT_FALSE(ParseNodeRecord(bad).ok());
  bad = ToJson(n);
  bad["name"] = "../etc";
  EXPECT_FALSE(ParseNodeRecord(bad).ok());
  EXPECT_FALSE(ParseAllocation(json{{"reserved", {{"cpu_milli", 1}}}, {"sandboxes", 0}}).ok());
}

TEST(Keys, NodeKeysSplit) {
  std::string name, what;
  ASSERT_TRUE(keys::SplitNodeKey(keys::Alloc("n-7"), &name, &what));
  EXPECT_EQ(name, "n-7");
  EXPECT_EQ(what, "alloc");
  EXPECT_FALSE(keys::SplitNodeKey(keys::Sandbox("x"), &name, &what));
  EXPECT_FALSE(keys::SplitNodeKey(keys::kNodes + "lonely", &name, &what));
}

TEST(Placement, FiltersSayWhyNothingFits) {
  std::vector<NodeView> nodes = {{Node("a")}, {Node("b")}};
  PlacementRequest vm = Small();
  vm.backend = BackendKind::kVm;
  auto r = Rank(nodes, vm, {}, 1);
  EXPECT_EQ(r.status().code(), Code::kInvalid);
  EXPECT_NE(r.status().message().find("vm backend"), std::string::npos);

  PlacementRequest gpu = Small();
  gpu.node_selector = {{"gpu", "h100"}};
  EXPECT_EQ(Rank(nodes, gpu, {}, 1).status().code(), Code::kInvalid);
  nodes[1].record.labels = {{"gpu", "h100"}};
  auto only_b = Rank(nodes, gpu, {}, 1);
  ASSERT_TRUE(only_b.ok());
  EXPECT_EQ(*only_b, std::vector<std::string>{"b"});
  // Every node carries its name as warren.node, unasked.
  PlacementRequest on_a = Small();
  on_a.node_selector = {{"warren.node", "a"}};
  auto only_a = Rank(nodes, on_a, {}, 1);
  ASSERT_TRUE(only_a.ok());
  EXPECT_EQ(*only_a, std::vector<std::string>{"a"});
  on_a.node_selector["gpu"] = "h100";  // a carries no gpu label
  EXPECT_EQ(Rank(nodes, on_a, {}, 1).status().code(), Code::kInvalid);

  PlacementRequest huge = Small();
  huge.resources.memory_mb = 4 << 20;  // 4 TiB
  EXPECT_EQ(Rank(nodes, huge, {}, 1).status().code(), Code::kInvalid);

  // Full: a quota error with a retry hint, not an invalid request.
  for (auto& n : nodes) n.alloc.reserved = n.record.capacity;
  auto full = Rank(nodes, Small(), {}, 1);
  EXPECT_EQ(full.status().code(), Code::kQuota);
  EXPECT_GT(full.status().retry_after_s(), 0);

  for (auto& n : nodes) {
    n.alloc = {};
    n.admin.cordoned = true;
  }
  EXPECT_EQ(Rank(nodes, Small(), {}, 1).status().code(), Code::kUnavailable);
  nodes[0].admin.cordoned = false;
  nodes[0].admin.draining = true;
  EXPECT_FALSE(Rank(nodes, Small(), {}, 1).ok());
}

TEST(Placement, SpreadPackAndLayers) {
  std::vector<NodeView> nodes = {{Node("busy")}, {Node("idle")}};
  nodes[0].alloc.reserved = {100000, 100000, 0};
  PlacementPolicy spread{.jitter = 0};
  PlacementPolicy pack{.strategy = PlacementPolicy::Strategy::kPack, .jitter = 0};
  EXPECT_EQ(Rank(nodes, Small(), spread, 1)->front(), "idle");
  EXPECT_EQ(Rank(nodes, Small(), pack, 1)->front(), "busy");
  // The busy node holds the layers: worth more than a little room, not more than a lot.
  nodes[0].record.layers = {"sha256:base", "sha256:tool"};
  PlacementRequest req = Small();
  req.layers = {"sha256:base", "sha256:tool"};
  nodes[0].alloc.reserved = {10000, 10000, 0};
  EXPECT_EQ(Rank(nodes, req, spread, 1)->front(), "busy");
  nodes[0].alloc.reserved = {150000, 1200000, 0};
  EXPECT_EQ(Rank(nodes, req, spread, 1)->front(), "idle");
}

TEST(Placement, OvercommitRatiosBoundTheSum) {
  std::vector<NodeView> nodes = {{Node("n", 2, 4)}};  // 2 cores, 4 GiB
  nodes[0].alloc.reserved = {2000, 2048, 0};
  PlacementPolicy none;
  EXPECT_EQ(Rank(nodes, Small(), none, 1).status().code(), Code::kQuota);
  PlacementPolicy twice{.cpu_overcommit = 2.0};
  EXPECT_TRUE(Rank(nodes, Small(), twice, 1).ok());
  EXPECT_EQ(LimitOf(nodes[0].record, twice).cpu_milli, 4000);
}

TEST(Placement, ANodesOwnRatiosWinOverThePolicy) {
  std::vector<NodeView> nodes = {{Node("n", 2, 4)}};  // 2 cores, 4 GiB
  nodes[0].alloc.reserved = {1000, 4096, 0};          // its memory fully requested
  PlacementPolicy none;
  EXPECT_EQ(Rank(nodes, Small(), none, 1).status().code(), Code::kQuota);
  nodes[0].record.memory_overcommit = 4;  // it reclaims idle memory: 16 GiB of requests
  EXPECT_TRUE(Rank(nodes, Small(), none, 1).ok());
  EXPECT_EQ(LimitOf(nodes[0].record, none).memory_mb, 4 * 4096);
  EXPECT_EQ(LimitOf(nodes[0].record, none).cpu_milli, 2000);  // CPU not set: the policy's
  // Its record says so through etcd, and an older record without the fields still parses.
  auto back = ParseNodeRecord(ToJson(nodes[0].record));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->memory_overcommit, 4);
  nlohmann::json old = ToJson(nodes[0].record);
  old.erase("memory_overcommit");
  old.erase("cpu_overcommit");
  EXPECT_TRUE(ParseNodeRecord(old).ok());
  old["memory_overcommit"] = -1;
  EXPECT_FALSE(ParseNodeRecord(old).ok());
}

TEST(Placement, BatchOf32000SpreadsOver160Nodes) {
  std::vector<NodeView> nodes;
  for (int i = 0; i < 160; ++i) nodes.push_back({Node("n" + std::to_string(i))});
  PlacementRequest half = Small();  // the unit's shape: 200 sandboxes a node on 192 cores
  half.resources.cpu_milli = 500;
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = PlanBatch(nodes, half, 32000, {}, 7);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int64_t total = 0, lo = INT64_MAX, hi = 0;
  for (const auto& [n, c] : plan) {
    total += c;
    lo = std::min(lo, c);
    hi = std::max(hi, c);
  }
  EXPECT_EQ(total, 32000);
  EXPECT_EQ(plan.size(), 160u);
  EXPECT_LE(hi - lo, 1) << "spread evenly";
  RecordProperty("plan_ms", std::to_string(ms));

  // More than fits: as many as fit, no node past its capacity (192 cores, half a core each).
  auto over = PlanBatch(nodes, half, 70000, {}, 7);
  total = 0;
  for (const auto& [n, c] : over) {
    EXPECT_LE(c, 384);
    total += c;
  }
  EXPECT_EQ(total, 160 * 384);

  // Pack: fills nodes one after another.
  auto packed = PlanBatch(nodes, Small(), 400, {.strategy = PlacementPolicy::Strategy::kPack}, 7);
  EXPECT_EQ(packed.size(), 3u);
}

TEST(Reservations, RacingReserversNeverPassTheLimit) {
  MemKv kv;
  const Resources limit{16000, 1 << 20, 1 << 20};
  std::atomic<int64_t> granted{0};
  std::vector<std::thread> threads;
  // Four "API servers", each with its own cache, 10 tries each for 1 core: 16 fit.
  for (int s = 0; s < 4; ++s) {
    threads.emplace_back([&, s] {
      Reservations mine(&kv);
      for (int i = 0; i < 10; ++i) {
        auto n = mine.Reserve("n1", {1000, 1, 1}, 1, limit, false, [&](int64_t) {
          return std::vector<TxnOp>{
              TxnOp::Put(keys::Sandbox("s" + std::to_string(s) + "-" + std::to_string(i)), "{}")};
        });
        if (n.ok())
          granted += *n;
        else
          EXPECT_EQ(n.status().code(), Code::kQuota) << n.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted.load(), 16);
  Reservations reader(&kv);
  auto a = reader.Read("n1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->reserved.cpu_milli, 16000);
  EXPECT_EQ(a->sandboxes, 16);
  // A record exists for each reservation, and none for a refused one.
  auto records = kv.List(keys::kSandboxes);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->count, 16);

  // Partial: as many as fit.
  ASSERT_TRUE(reader.Release("n1", {1000, 1, 1}, 6).ok());
  auto some = reader.Reserve("n1", {1000, 1, 1}, 10, limit, true);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(*some, 6);
  // A release never takes the sum below zero.
  ASSERT_TRUE(reader.Release("n1", {1000, 1, 1}, 100).ok());
  EXPECT_EQ(reader.Read("n1")->reserved.cpu_milli, 0);
}

TEST(Reservations, UnavailableEtcdIsAnErrorAndChangesNothing) {
  MemKv kv;
  Reservations r(&kv);
  kv.SetAvailable(false);
  auto n = r.Reserve("n1", {1000, 1, 1}, 1, {4000, 10, 10}, false);
  EXPECT_EQ(n.status().code(), Code::kUnavailable);
  kv.SetAvailable(true);
  EXPECT_EQ(r.Read("n1")->sandboxes, 0);
}

bool WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

TEST(Membership, NodesJoinLeaveExpireAndComeBack) {
  MemKv kv;
  NodeDirectory dir(&kv);
  std::mutex mu;
  std::vector<std::string> gone;
  dir.SetOnNodeGone([&](const std::string& n) {
    std::lock_guard l(mu);
    gone.push_back(n);
  });
  ASSERT_TRUE(dir.Start().ok());

  std::atomic<int64_t> live{0};
  auto snapshot = [&](const std::string& name) {
    return [&, name] {
      NodeRecord r = Node(name);
      r.sandboxes = live.load();
      return r;
    };
  };
  NodeHeartbeat a(&kv, 3, snapshot("a"), 20), b(&kv, 3, snapshot("b"), 20);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return dir.Ready().size() == 2; }));

  // A changed record is republished.
  live = 5;
  ASSERT_TRUE(WaitFor([&] { return dir.Get("a") && dir.Get("a")->record.sandboxes == 5; }));

  // Admin flags and reservations show in the view.
  ASSERT_TRUE(kv.Put(keys::NodeAdmin("b"), ToJson(NodeAdmin{true, false}).dump()).ok());
  ASSERT_TRUE(WaitFor([&] { return dir.Get("b") && dir.Get("b")->admin.cordoned; }));

  // A clean leave: the record goes at once.
  b.Stop(true);
  ASSERT_TRUE(WaitFor([&] { return !dir.Get("b"); }));
  // b is still known (its admin record stays): down.
  EXPECT_EQ(dir.Known(), std::vector<std::string>{"b"});

  // A node that stops heartbeating (its process is gone) expires after its TTL.
  NodeHeartbeat c(&kv, 3, snapshot("c"), 20);
  ASSERT_TRUE(c.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return dir.Get("c").has_value(); }));
  c.Stop(false);
  kv.Advance(3.5);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(mu);
    return std::find(gone.begin(), gone.end(), "c") != gone.end();
  }));
  EXPECT_FALSE(dir.Get("c"));

  // A node whose lease expired while it kept running (etcd away too long) joins again.
  kv.Advance(3.5);  // a's lease too, between two of its keepalives
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(mu);
    return std::find(gone.begin(), gone.end(), "a") != gone.end();
  }));
  ASSERT_TRUE(WaitFor([&] { return dir.Get("a").has_value() && a.registered(); }));
  a.Stop(true);
}

}  // namespace
}  // namespace warren::cluster

namespace warren::cluster {
namespace {

// Concurrent creates on one node share transactions, none passes the limit, every granted one
// has its record, and a refused one has none.
// etcd's commit takes milliseconds (an fsync); MemKv's microseconds. With a commit this slow,
// 16 threads always find one in flight and queue behind it.
class SlowKv : public MemKv {
 public:
  Result<TxnResult> Commit(const Txn& txn) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return MemKv::Commit(txn);
  }
};

TEST(ReservationBatcher, GroupsConcurrentReservationsWithinTheLimit) {
  SlowKv kv;
  Reservations res(&kv);
  ReservationBatcher batcher(&res);
  const Resources limit{100000, 1 << 20, 1 << 20};  // room for 100 of 1 core
  std::atomic<int> ok{0}, full{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string id = "b" + std::to_string(t) + "-" + std::to_string(i);
        Status st =
            batcher.Reserve("n1", {1000, 1, 1}, limit, {TxnOp::Put(keys::Sandbox(id), "{}")});
        if (st.ok())
          ++ok;
        else if (st.code() == Code::kQuota)
          ++full;
        else
          ADD_FAILURE() << st.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
  EXPECT_EQ(full.load(), 60);
  EXPECT_EQ(res.Read("n1")->sandboxes, 100);
  EXPECT_EQ(kv.List(keys::kSandboxes)->count, 100);
  EXPECT_EQ(batcher.items(), 100u);
  // 160 reservations (60 refused) in far fewer transactions.
  EXPECT_LT(batcher.groups(), 80u);
  // etcd down: every waiter gets the store's error, nothing is written.
  kv.SetAvailable(false);
  EXPECT_EQ(batcher.Reserve("n2", {1, 1, 1}, limit, {}).code(), Code::kUnavailable);
}

// Two replicas (each its own reservation cache and batcher) on one node: their transactions
// collide and are built again; what each carries is written in full every time, never lost
// (a retried group once sent its writes moved-from: empty keys).
TEST(ReservationBatcher, WritesSurviveRacesBetweenReplicas) {
  MemKv kv;
  Reservations res_a(&kv), res_b(&kv);
  ReservationBatcher a(&res_a), b(&res_b);
  const Resources limit{1000000, 1 << 20, 1 << 20};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string id = "r" + std::to_string(t) + "-" + std::to_string(i);
        Status st = (t % 2 ? a : b)
                        .Reserve("n1", {1000, 1, 1}, limit, {TxnOp::Put(keys::Sandbox(id), "{}")});
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    });
  for (auto& t : threads) t.join();
  // The threads race only when the scheduler lets them (on a loaded host they may not): one
  // collision made for certain, B writing after A with what it read before A wrote.
  ASSERT_TRUE(res_b.Read("n1").ok());
  ASSERT_TRUE(a.Reserve("n1", {1000, 1, 1}, limit, {TxnOp::Put(keys::Sandbox("ra"), "{}")}).ok());
  ASSERT_TRUE(b.Reserve("n1", {1000, 1, 1}, limit, {TxnOp::Put(keys::Sandbox("rb"), "{}")}).ok());
  EXPECT_EQ(res_a.Read("n1")->sandboxes, 162);
  EXPECT_EQ(kv.List(keys::kSandboxes)->count, 162);
  EXPECT_GT(res_b.conflicts(), 0u) << "B's stale view did not collide";
}

}  // namespace
}  // namespace warren::cluster
