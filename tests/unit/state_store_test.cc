// The StateStore suite on SQLite and on the etcd store over MemKv; SQLite's own reopening.
#include "server/state_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include "cluster/kv_state_store.h"
#include "image/tar_extract.h"
#include "mem_kv.h"
#include "state_store_conformance.h"

namespace warren::server {
namespace {

// A SQLite store in a directory removed with the store.
std::shared_ptr<StateStore> TempSqlite() {
  char tmpl[] = "/tmp/warren-state-XXXXXX";
  if (!mkdtemp(tmpl)) return nullptr;
  auto s = StateStore::Open(std::string(tmpl) + "/state.db");
  if (!s.ok()) return nullptr;
  std::string dir = tmpl;
  return std::shared_ptr<StateStore>(s->release(), [dir](StateStore* p) {
    delete p;
    (void)image::RemoveTree(dir);
  });
}

// The etcd store over a MemKv that lives as long as it.
std::shared_ptr<StateStore> MemKvStore() {
  auto kv = std::make_shared<cluster::MemKv>();
  auto* store = new cluster::KvStateStore(kv.get());
  return std::shared_ptr<StateStore>(store, [kv](StateStore* p) { delete p; });
}

INSTANTIATE_TEST_SUITE_P(Stores, StateStoreConformance,
                         ::testing::Values(StateTarget{"Sqlite", TempSqlite},
                                           StateTarget{"KvOverMemKv", MemKvStore}),
                         [](const auto& info) { return info.param.name; });

TEST(StateStore, SandboxesAndLayersSurviveReopen) {
  char tmpl[] = "/tmp/warren-state-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string db = std::string(tmpl) + "/state.db";
  {
    auto s = StateStore::Open(db);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(
        (*s)->PutSandbox({{"id", "sb-1"}, {"state", "running"}, {"created_at", "t1"}}).ok());
    ASSERT_TRUE((*s)->PutLayer({"py", "1", "sha256:aa", "base", "t", "tar", 10}).ok());
    ASSERT_TRUE((*s)->PutLayer({"py", "2", "sha256:aa", "base", "t", "tar", 10}).ok());
    EXPECT_EQ((*s)->LayerRefs("sha256:aa"), 2);
  }
  auto s = StateStore::Open(db);
  ASSERT_TRUE(s.ok());
  auto sb = (*s)->GetSandbox("sb-1");
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ((*sb)["state"], "running");
  EXPECT_EQ((*s)->GetSandbox("nope").status().code(), Code::kNotFound);
  EXPECT_EQ((*s)->ListLayers().size(), 2u);
  ASSERT_TRUE((*s)->RemoveLayer("py", "1").ok());
  EXPECT_EQ((*s)->RemoveLayer("py", "1").code(), Code::kNotFound);
  EXPECT_EQ((*s)->LayerRefs("sha256:aa"), 1);
  ASSERT_TRUE((*s)->RemoveSandbox("sb-1").ok());
  EXPECT_TRUE((*s)->ListSandboxes().empty());
  (void)image::RemoveTree(tmpl);
}

TEST(StateStore, AResolvedTagFollowsItsMovesAndRemoval) {
  char tmpl[] = "/tmp/warren-state-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  auto s = StateStore::Open(std::string(tmpl) + "/state.db");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->GetLayer("runner", "1").status().code(), Code::kNotFound);
  ASSERT_TRUE((*s)->PutLayer({"runner", "1", "sha256:aa", "base", "t", "tar", 10}).ok());
  for (int i = 0; i < 2; i++)
    EXPECT_EQ((*s)->GetLayer("runner", "1")->digest, "sha256:aa");  // read, then remembered
  ASSERT_TRUE((*s)->PutLayer({"runner", "1", "sha256:bb", "base", "t", "tar", 10}).ok());
  EXPECT_EQ((*s)->GetLayer("runner", "1")->digest, "sha256:bb");
  ASSERT_TRUE((*s)->RemoveLayer("runner", "1").ok());
  EXPECT_EQ((*s)->GetLayer("runner", "1").status().code(), Code::kNotFound);
  (void)image::RemoveTree(tmpl);
}

// A create whose API server is gone (its /warren/apiservers key went with its lease) is an
// orphan; one whose maker lives, or that finished, is not.
TEST(KvStateStore, CreatesOfAGoneApiServerAreOrphans) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv, "api-1");
  auto rec = [](const std::string& id, const char* state) {
    return nlohmann::json{{"id", id},          {"owner", "o"}, {"state", state},
                          {"created_at", "t"}, {"cpu", 1.0},   {"memory_mb", 0}};
  };
  ASSERT_TRUE(store.InsertSandbox(rec("sb-1", "creating"), {}).ok());
  ASSERT_TRUE(store.InsertSandbox(rec("sb-2", "creating"), {}).ok());
  auto lease = kv.GrantLease(5);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(kv.Put("/warren/apiservers/api-1", "{}", *lease).ok());
  auto none = store.OrphanedCreates();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // sb-2's create finished: it is no one's to clean up any more.
  auto read = store.GetSandboxStamped("sb-2");
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(store.PutSandboxIf(rec("sb-2", "running"), read->stamp).ok());
  kv.Advance(6);  // api-1 stops heartbeating
  auto orphans = store.OrphanedCreates();
  ASSERT_TRUE(orphans.ok());
  EXPECT_EQ(*orphans, std::vector<std::string>{"sb-1"});
  ASSERT_TRUE(store.RemoveSandbox("sb-1").ok());
  EXPECT_TRUE(store.OrphanedCreates()->empty());
  EXPECT_EQ(kv.Get("/warren/creating/sb-1").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace warren::server
