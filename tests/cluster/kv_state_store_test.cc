// The StateStore suite on the etcd store over a real etcd (the binary's shared member).
#include "cluster/kv_state_store.h"

#include <gtest/gtest.h>

#include "etcd_process.h"
#include "state_store_conformance.h"

namespace warren::server {
namespace {

std::shared_ptr<StateStore> EtcdStore() {
  std::shared_ptr<cluster::KvStore> kv =
      warren::testing::ClientOf(warren::testing::SharedEtcd()->endpoints());
  auto* store = new cluster::KvStateStore(kv.get());
  return std::shared_ptr<StateStore>(store, [kv](StateStore* p) { delete p; });
}

INSTANTIATE_TEST_SUITE_P(Etcd, StateStoreConformance,
                         ::testing::Values(StateTarget{"KvOverEtcd", EtcdStore}),
                         [](const auto& info) { return info.param.name; });

TEST(KvStateStore, AStepTooLargeForEtcdIsRefusedByName) {
  auto kv = warren::testing::ClientOf(warren::testing::SharedEtcd()->endpoints());
  cluster::KvStateStore store(kv.get());
  const std::string big(2 << 20, 'x');
  Status st = store.InsertStep("big-traj", 0, "big-exec", {{"stdout", big}});
  EXPECT_EQ(st.code(), Code::kInvalid);
  EXPECT_NE(st.ToString().find("at most"), std::string::npos);
  EXPECT_EQ(store.FindStepByExec("big-exec").status().code(), Code::kNotFound);
}

TEST(KvStateStore, UnreachableEtcdIsUnavailable) {
  warren::testing::EtcdProcess gone(1);
  const std::string url = gone.endpoint(0);
  gone.Stop(0);
  auto kv = warren::testing::ClientOf(url);
  cluster::KvStateStore store(kv.get());
  EXPECT_EQ(store.GetSandbox("x").status().code(), Code::kUnavailable);
  EXPECT_EQ(store.PutSandbox({{"id", "x"}}).code(), Code::kUnavailable);
  EXPECT_EQ(store.InsertStep("t", 0, "e", {}).code(), Code::kUnavailable);
  // "Cannot read" is never "there are none" (a token list that came back empty would revoke
  // every token).
  EXPECT_EQ(store.ListDocs("token").status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace warren::server
