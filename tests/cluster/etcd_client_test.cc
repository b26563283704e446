// EtcdClient against a real etcd: the KvStore conformance suite (the same one MemKv passes),
// then what only a real cluster shows: a member going away under a watch and under requests,
// and no etcd at all.
#include "cluster/etcd_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "etcd_process.h"
#include "kv_conformance.h"

namespace warren::cluster {
namespace {

using warren::testing::EtcdProcess;

using warren::testing::ClientOf;
using warren::testing::SharedEtcd;

INSTANTIATE_TEST_SUITE_P(Etcd, KvConformance,
                         ::testing::Values(KvTarget{
                             "Etcd", [] { return ClientOf(SharedEtcd()->endpoints()); },
                             [](KvStore*, double s) {
                               std::this_thread::sleep_for(
                                   std::chrono::milliseconds(static_cast<int>(s * 1000)));
                             },
                             [](KvStore* kv, int64_t rev) {
                               ASSERT_TRUE(static_cast<EtcdClient*>(kv)->Compact(rev).ok());
                             }}),
                         [](const auto& info) { return info.param.name; });

TEST(EtcdClient, NoEtcdIsUnavailableWithAClearMessage) {
  // A port nothing listens on (the shared etcd's peer port would answer HTTP; pick a fresh one
  // by starting and stopping a member).
  EtcdProcess gone(1);
  const std::string url = gone.endpoint(0);
  gone.Stop(0);
  auto kv = ClientOf(url, 1000);
  auto r = kv->Put("/k", "v");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot be reached"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(kv->Get("/k").status().code(), Code::kUnavailable);
  EXPECT_FALSE(kv->WatchRange("/k", "", 0, {}).ok());
}

// One member of three stopped: requests go on through the others, and a watch started on the
// stopped member resumes elsewhere without losing or repeating an event.
TEST(EtcdClient, ThreeMembersOneStopped) {
  EtcdProcess etcd(3);
  auto kv = ClientOf(etcd.endpoints());
  std::mutex mu;
  std::vector<std::string> seen;
  ASSERT_TRUE(kv->Get("/none").status().code() == Code::kNotFound);  // prefers member 0
  auto w = kv->WatchRange("/ha/", PrefixEnd("/ha/"), 0,
                          {[&](const std::vector<WatchEvent>& evs) {
                             std::lock_guard l(mu);
                             for (const auto& e : evs) seen.push_back(e.kv.value);
                           },
                           nullptr});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(kv->Put("/ha/k", std::to_string(i)).ok());
  etcd.Stop(0);
  // A write in flight when the leader goes can time out (etcd drops its proposal): the caller
  // retries, as the cluster code does with writes it can repeat. An election takes < 1 s.
  for (int i = 5; i < 10; ++i) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    Result<int64_t> r = kv->Put("/ha/k", std::to_string(i));
    while (!r.ok() && r.status().code() == Code::kUnavailable &&
           std::chrono::steady_clock::now() < give_up)
      r = kv->Put("/ha/k", std::to_string(i));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  auto got = kv->Get("/ha/k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value, "9");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (;;) {
    {
      std::lock_guard l(mu);
      if ((!seen.empty() && seen.back() == "9") || std::chrono::steady_clock::now() > deadline)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard l(mu);
  // Every write once, in order (a retried write whose first try was applied after all shows
  // twice in a row, and is counted once).
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  ASSERT_EQ(seen.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], std::to_string(i));
}

// Quorum lost, then back: a read sent in the outage is not failed at the first round of
// members (one holds it without a leader, the others refuse) but goes round again until a
// member restarted past that first round answers.
TEST(EtcdClient, AReadWaitsOutAnOutageWithinItsBudget) {
  EtcdProcess etcd(3);
  auto kv = ClientOf(etcd.endpoints());
  ASSERT_TRUE(kv->Put("/outage", "v").ok());
  etcd.Stop(1);
  etcd.Stop(2);
  Result<KeyValue> got;
  std::thread read([&] { got = kv->Get("/outage"); });
  // Past a first round: member 0 holds the read for the whole request timeout (5 s). The
  // member starts from this thread: its parent-death signal follows the thread that forked.
  std::this_thread::sleep_for(std::chrono::milliseconds(5500));
  etcd.Start(1);
  read.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->value, "v");
}

}  // namespace
}  // namespace warren::cluster
