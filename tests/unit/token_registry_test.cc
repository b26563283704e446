// TokenRegistry over a cluster's store (KvStateStore on MemKv): a reload that read the store
// before a token was made here does not drop it, and a token made through another replica
// a moment ago can be removed here.
#include <gtest/gtest.h>

#include <functional>

#include "cluster/kv_state_store.h"
#include "mem_kv.h"
#include "server/auth.h"

namespace warren::server {
namespace {

// A store whose next range read runs `after_read` once it has read: what another thread does
// while a reload is between its read and its swap.
class SlowReadKv : public cluster::MemKv {
 public:
  Result<cluster::RangeResult> Range(const cluster::RangeRequest& req) override {
    auto r = MemKv::Range(req);
    if (auto hook = std::exchange(after_read, nullptr)) hook();
    return r;
  }
  std::function<void()> after_read;
};

TEST(TokenRegistry, AReloadRacingACreateKeepsTheNewToken) {
  SlowReadKv kv;
  cluster::KvStateStore store(&kv);
  TokenRegistry tokens(&store, "admin-secret");
  ASSERT_TRUE(tokens.Load().ok());
  kv.after_read = [&] {
    ASSERT_TRUE(tokens.Create(R"({"name": "racer", "scopes": ["sandbox:*"]})").ok());
  };
  ASSERT_TRUE(tokens.Load().ok());  // read before the create, swapped in after it
  EXPECT_EQ(tokens.List()["tokens"].size(), 1u) << tokens.List().dump();
  EXPECT_TRUE(tokens.Remove("racer").ok());
  EXPECT_EQ(tokens.List()["tokens"].size(), 0u);
}

TEST(TokenRegistry, ATokenMadeAtAnotherReplicaCanBeRemovedHereAtOnce) {
  cluster::MemKv kv;
  cluster::KvStateStore store_a(&kv, "api-a"), store_b(&kv, "api-b");
  TokenRegistry a(&store_a, "admin-secret"), b(&store_b, "admin-secret");
  a.SetReloadOnMiss(true);
  b.SetReloadOnMiss(true);
  ASSERT_TRUE(a.Load().ok());
  ASSERT_TRUE(b.Load().ok());
  ASSERT_TRUE(a.Create(R"({"name": "elsewhere", "scopes": ["sandbox:*"]})").ok());
  EXPECT_TRUE(b.Remove("elsewhere").ok());
  EXPECT_EQ(b.Remove("never-made").code(), Code::kNotFound);
  ASSERT_TRUE(a.Load().ok());
  EXPECT_EQ(a.List()["tokens"].size(), 0u);
}

}  // namespace
}  // namespace warren::server
