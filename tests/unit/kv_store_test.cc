// The KvStore conformance suite on MemKv, and the etcd gateway's JSON mapping.
#include <gtest/gtest.h>

#include "cluster/etcd_client.h"
#include "cluster/etcd_json.h"
#include "kv_conformance.h"
#include "mem_kv.h"

namespace warren::cluster {
namespace {

using nlohmann::json;

INSTANTIATE_TEST_SUITE_P(Mem, KvConformance,
                         ::testing::Values(KvTarget{
                             "MemKv", [] { return std::make_unique<MemKv>(); },
                             [](KvStore* kv, double s) { static_cast<MemKv*>(kv)->Advance(s); },
                             [](KvStore* kv, int64_t rev) {
                               static_cast<MemKv*>(kv)->Compact(rev);
                             }}),
                         [](const auto& info) { return info.param.name; });

TEST(MemKv, UnavailableFailsEveryCall) {
  MemKv kv;
  kv.SetAvailable(false);
  EXPECT_EQ(kv.Put("k", "v").status().code(), Code::kUnavailable);
  EXPECT_EQ(kv.Get("k").status().code(), Code::kUnavailable);
  EXPECT_EQ(kv.Commit({}).status().code(), Code::kUnavailable);
  kv.SetAvailable(true);
  EXPECT_TRUE(kv.Put("k", "v").ok());
}

TEST(EtcdJson, TxnBodyAsTheGatewayWantsIt) {
  Txn t{.compare = {Compare::ModIs("/k", 7), Compare::Missing("/m"), Compare::ValueIs("/v", "x")},
        .success = {TxnOp::Put("/k", "v", 42), TxnOp::Delete("/a", "/b")},
        .failure = {TxnOp::Get("/k")}};
  json j = etcd_json::TxnBody(t);
  EXPECT_EQ(j["compare"][0],
            (json{{"key", "L2s="}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", "7"}}));
  EXPECT_EQ(j["compare"][1]["version"], "0");
  EXPECT_EQ(j["compare"][2]["value"], "eA==");
  EXPECT_EQ(j["success"][0]["request_put"],
            (json{{"key", "L2s="}, {"value", "dg=="}, {"lease", "42"}}));
  EXPECT_EQ(j["success"][1]["request_delete_range"],
            (json{{"key", "L2E="}, {"range_end", "L2I="}}));
  EXPECT_EQ(j["failure"][0]["request_range"], (json{{"key", "L2s="}}));
}

TEST(EtcdJson, AnswersWithFieldsLeftOut) {
  // proto3 JSON leaves out zero values: no "succeeded" is false, no "kvs" is none.
  auto t = etcd_json::ParseTxn(json::parse(
      R"({"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"}}}]})"));
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->succeeded);
  EXPECT_EQ(t->revision, 9);
  ASSERT_EQ(t->gets.size(), 1u);
  EXPECT_TRUE(t->gets[0].kvs.empty());

  auto r = etcd_json::ParseRange(json::parse(
      R"({"header":{"revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"2","value":"YmFy"}],"count":"1"})"));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].key, "foo");
  EXPECT_EQ(r->kvs[0].value, "bar");
  EXPECT_EQ(r->kvs[0].version, 2);
  EXPECT_EQ(r->kvs[0].lease, 0);

  // A keepalive of a lease that is gone: TTL left out.
  auto gone = etcd_json::ParseKeepAlive(json::parse(R"({"result":{"ID":"5"}})"));
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  auto alive = etcd_json::ParseKeepAlive(json::parse(R"({"result":{"ID":"5","TTL":"3"}})"));
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(*alive, 3);
}

TEST(EtcdJson, WatchMessages) {
  auto m = etcd_json::ParseWatchMessage(json::parse(
      R"({"result":{"header":{"revision":"4"},"events":[{"kv":{"key":"YQ==","mod_revision":"3","value":"Yg=="}},{"type":"DELETE","kv":{"key":"YQ==","mod_revision":"4"}}]}})"));
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->events.size(), 2u);
  EXPECT_EQ(m->events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(m->events[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(m->events[1].kv.mod_revision, 4);
  auto compacted = etcd_json::ParseWatchMessage(
      json::parse(R"({"result":{"canceled":true,"compact_revision":"12"}})"));
  ASSERT_TRUE(compacted.ok());
  EXPECT_EQ(compacted->compact_revision, 12);
  EXPECT_FALSE(
      etcd_json::ParseWatchMessage(json::parse(R"({"result":{"events":[{"kv":{"key":"!!"}}]}})"))
          .ok());
}

TEST(EtcdJson, ErrorsByGrpcCode) {
  auto st = etcd_json::ErrorStatus(
      json::parse(R"({"error":"etcdserver: requested lease not found","code":5})"), 404, "put",
      "/k");
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(st.op(), "etcd put");
  EXPECT_EQ(etcd_json::ErrorStatus(json::parse(R"({"message":"etcdserver: no leader","code":14})"),
                                   503, "put", "/k")
                .code(),
            Code::kUnavailable);
  EXPECT_EQ(
      etcd_json::ErrorStatus(json::parse(R"({"message":"bad","code":3})"), 400, "put", "/k").code(),
      Code::kInvalid);
  EXPECT_EQ(etcd_json::ErrorStatus(json(), 502, "put", "/k").code(), Code::kUnavailable);
}

TEST(EtcdEndpoints, Parsed) {
  auto o = ParseEtcdEndpoints("http://127.0.0.1:2379,http://127.0.0.2:2379/");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->endpoints.size(), 2u);
  EXPECT_EQ(o->endpoints[1], "http://127.0.0.2:2379");
  EXPECT_FALSE(ParseEtcdEndpoints("127.0.0.1:2379").ok());
  EXPECT_FALSE(ParseEtcdEndpoints("http://h:1/path").ok());
  EXPECT_FALSE(ParseEtcdEndpoints("").ok());
}

}  // namespace
}  // namespace warren::cluster
