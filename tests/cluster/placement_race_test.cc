// Two API servers (two clients, two reservation caches) placing on the same nodes of a real
// etcd at once: no node ends past its limit, every reservation has its record and none more.
#include <gtest/gtest.h>

#include <thread>

#include "cluster/keys.h"
#include "cluster/placement.h"
#include "cluster/reservations.h"
#include "etcd_process.h"

namespace warren::cluster {
namespace {

TEST(PlacementRace, TwoApiServersNeverPassANodesRatio) {
  const std::string prefix = "race-" + std::to_string(getpid()) + "-";
  std::vector<NodeView> nodes;
  for (int i = 0; i < 3; ++i) {
    NodeView v;
    v.record.name = prefix + std::to_string(i);
    v.record.capacity = {8000, 8192, 1 << 20};  // 8 cores
    v.record.backends = {runtime::BackendKind::kContainer};
    nodes.push_back(v);
  }
  const PlacementPolicy policy{.cpu_overcommit = 1.5};  // 12 sandboxes of 1 core a node
  PlacementRequest req;
  req.resources = {1000, 256, 100};
  std::atomic<int> placed{0}, refused{0};
  const std::string etcd = warren::testing::SharedEtcd()->endpoints();
  std::vector<std::thread> servers;
  for (int s = 0; s < 2; ++s) {
    servers.emplace_back([&, s] {
      auto kv = warren::testing::ClientOf(etcd);
      Reservations res(kv.get());
      for (int i = 0; i < 30; ++i) {
        // Each server ranks on its own (stale) view: reservations are the binding check.
        auto ranked = Rank(nodes, req, policy, s * 1000 + i);
        ASSERT_TRUE(ranked.ok());
        bool ok = false;
        for (const auto& node : *ranked) {
          const std::string id = node + "-sb-" + std::to_string(s) + "-" + std::to_string(i);
          auto n = res.Reserve(
              node, req.resources, 1, LimitOf(nodes[0].record, policy), false,
              [&](int64_t) { return std::vector<TxnOp>{TxnOp::Put(keys::Sandbox(id), "{}")}; });
          if (n.ok()) {
            ok = true;
            break;
          }
          ASSERT_EQ(n.status().code(), Code::kQuota) << n.status().ToString();
        }
        (ok ? placed : refused)++;
      }
    });
  }
  for (auto& t : servers) t.join();
  EXPECT_EQ(placed.load(), 36);  // 3 nodes x 12
  EXPECT_EQ(refused.load(), 24);
  auto kv = warren::testing::ClientOf(etcd);
  Reservations check(kv.get());
  int records = 0;
  for (const auto& n : nodes) {
    auto a = check.Read(n.record.name);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->reserved.cpu_milli, 12000);
    EXPECT_EQ(a->sandboxes, 12);
    auto r = kv->List(keys::Sandbox(n.record.name + "-sb-"));
    ASSERT_TRUE(r.ok());
    records += static_cast<int>(r->count);
  }
  EXPECT_EQ(records, 36);
}

}  // namespace
}  // namespace warren::cluster
