// The route table: literal and {param} segments, a trailing {rest*}, and the 405 answer with
// the methods a path takes, in one order.
#include "server/route_table.h"

#include <gtest/gtest.h>

namespace warren::server {
namespace {

std::vector<std::string> Segs(std::initializer_list<const char*> s) { return {s.begin(), s.end()}; }

RouteTable Table() {
  return RouteTable({
      {Method::kGet, "/healthz", "", 1, BodyTo::kMemory, true},
      {Method::kHead, "/healthz", "", 1, BodyTo::kMemory, true},
      {Method::kPost, "/v1/sandboxes", "sandbox:write", 10},
      {Method::kGet, "/v1/sandboxes", "sandbox:read", 10},
      {Method::kDelete, "/v1/sandboxes/{id}", "sandbox:write", 10},
      {Method::kGet, "/v1/sandboxes/{id}", "sandbox:read", 10},
      {Method::kGet, "/v1/sandboxes/{id}/execs/{exec_id}/stream", "exec", 10},
      {Method::kDelete, "/v1/layers/{ref*}", "image:write", 10},
      {Method::kPost, "/v1/layers", "image:write", 1000, BodyTo::kFile},
  });
}

TEST(RouteTable, MatchesLiteralsAndParameters) {
  RouteTable t = Table();
  RouteMatch m =
      t.Match(Method::kGet, Segs({"v1", "sandboxes", "sb-1", "execs", "ex-2", "stream"}));
  ASSERT_GE(m.index, 0);
  EXPECT_EQ(t[m.index].scope, "exec");
  EXPECT_EQ(m.params, (PathParams{{"id", "sb-1"}, {"exec_id", "ex-2"}}));
  m = t.Match(Method::kPost, Segs({"v1", "layers"}));
  ASSERT_GE(m.index, 0);
  EXPECT_EQ(t[m.index].body_to, BodyTo::kFile);
  EXPECT_EQ(t[m.index].body_limit, 1000u);
  // A literal never matches a parameter's place the other way round.
  EXPECT_EQ(t.Match(Method::kGet, Segs({"v1", "sandboxes", "sb-1", "execs", "ex-2"})).index, -1);
}

TEST(RouteTable, ARestParameterTakesEveryRemainingSegment) {
  RouteTable t = Table();
  RouteMatch m = t.Match(Method::kDelete, Segs({"v1", "layers", "org", "py:3.11"}));
  ASSERT_GE(m.index, 0);
  EXPECT_EQ(m.params.at("ref"), "org/py:3.11");
  m = t.Match(Method::kDelete, Segs({"v1", "layers", "py:3.11"}));
  ASSERT_GE(m.index, 0);
  EXPECT_EQ(m.params.at("ref"), "py:3.11");
  // At least one segment.
  m = t.Match(Method::kDelete, Segs({"v1", "layers"}));
  EXPECT_EQ(m.index, -1);
  EXPECT_EQ(m.allow, "POST");
}

TEST(RouteTable, AWrongMethodNamesTheOnesThePathTakesInOneOrder) {
  RouteTable t = Table();
  RouteMatch m = t.Match(Method::kPut, Segs({"v1", "sandboxes"}));
  EXPECT_EQ(m.index, -1);
  EXPECT_EQ(m.allow, "GET, POST");  // the table lists POST first
  m = t.Match(Method::kPost, Segs({"v1", "sandboxes", "sb-1"}));
  EXPECT_EQ(m.allow, "GET, DELETE");
  EXPECT_FALSE(m.public_path);
  m = t.Match(Method::kDelete, Segs({"healthz"}));
  EXPECT_EQ(m.allow, "GET, HEAD");
  EXPECT_TRUE(m.public_path);
  m = t.Match(Method::kOther, Segs({"v1", "sandboxes"}));
  EXPECT_EQ(m.allow, "GET, POST");
}

TEST(RouteTable, AnUnknownPathHasNoRouteAndNoAllow) {
  RouteTable t = Table();
  for (auto segs :
       {Segs({}), Segs({"v1"}), Segs({"v2", "sandboxes"}), Segs({"v1", "sandboxes", "a", "b"})}) {
    RouteMatch m = t.Match(Method::kGet, segs);
    EXPECT_EQ(m.index, -1);
    EXPECT_EQ(m.allow, "");
    EXPECT_FALSE(m.public_path);
  }
}

}  // namespace
}  // namespace warren::server
