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

}  // namespace
}  // namespace warren::server
