#include "server/api_types.h"

#include <gtest/gtest.h>

namespace warren::server {
namespace {

TEST(SandboxSpec, DefaultsAndRoundTrip) {
  auto s = ParseSandboxSpec({{"image", "py:3.11"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->backend, runtime::BackendKind::kContainer);
  EXPECT_EQ(s->memory_mb, 512u);
  EXPECT_EQ(s->network.mode, "none");
  auto again = ParseSandboxSpec(ToJson(*s));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(*s));
}

TEST(SandboxSpec, RejectsUnknownFieldsWrongTypesAndLimits) {
  auto bad = [](json j) {
    auto r = ParseSandboxSpec(j);
    EXPECT_FALSE(r.ok()) << j.dump();
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad({{"image", "a:b"}, {"imagee", "x"}}).find("unknown field `imagee`"),
            std::string::npos);
  bad({{"image", 5}});
  bad(json::object());  // image required
  bad({{"image", "no-tag"}});
  bad({{"image", "a:b"}, {"memory_mb", -1}});
  bad({{"image", "a:b"}, {"memory_mb", 1.5}});
  bad({{"image", "a:b"}, {"memory_mb", 1 << 30}});
  bad({{"image", "a:b"}, {"cpu", "1"}});
  bad({{"image", "a:b"}, {"backend", "docker"}});
  bad({{"image", "a:b"}, {"env", {{"A=B", "x"}}}});
  bad({{"image", "a:b"}, {"env", {{"A", 1}}}});
  bad({{"image", "a:b"}, {"network", {{"mode", "open"}}}});
  bad({{"image", "a:b"}, {"network", {{"mode", "none"}, {"extra", 1}}}});
  bad({{"image", "../../etc:x"}});
  bad(json::array());
}

TEST(SandboxSpec, NodeSelectorIsLabelsOfTheNodesShape) {
  auto s = ParseSandboxSpec({{"image", "a:b"}, {"node_selector", {{"warren.node", "n-1"}}}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->node_selector.at("warren.node"), "n-1");
  EXPECT_EQ(ToJson(*s)["node_selector"], json({{"warren.node", "n-1"}}));
  for (json sel : {json{{"zone", ""}}, json{{"a/b", "x"}}, json{{"zone", 3}}, json("zone=a"),
                   json{{"zone", std::string(64, 'a')}}}) {
    auto r = ParseSandboxSpec({{"image", "a:b"}, {"node_selector", sel}});
    EXPECT_FALSE(r.ok()) << sel.dump();
    if (!r.ok()) EXPECT_NE(r.status().message().find("node_selector"), std::string::npos);
  }
}

TEST(ExecRequest, ArgvOrCmd) {
  auto a = ParseExecRequest({{"argv", {"echo", "hi"}}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->argv.size(), 2u);
  EXPECT_TRUE(a->wait);
  auto c = ParseExecRequest({{"cmd", "echo hi | wc -c"}, {"stdin_b64", "aGk="}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi | wc -c"}));
  EXPECT_EQ(*c->stdin_data, "hi");
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"cmd", "b"}}).ok());
  EXPECT_FALSE(ParseExecRequest(json::object()).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", json::array()}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {1}}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"cwd", "relative"}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"timeout_s", 0}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"max_output_bytes", 1ull << 40}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"stdin_b64", "@@"}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {"a"}}, {"bogus", true}}).ok());
  EXPECT_FALSE(ParseExecRequest({{"argv", {std::string(2 << 20, 'x')}}}).ok());
}

TEST(ExecRequest, InteractiveExecsDefaultToNoWaitNoDeadlineAndARoomyOutput) {
  auto t = ParseExecRequest({{"argv", {"sh"}}, {"tty", true}, {"rows", 40}, {"cols", 132}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->tty.has_value());
  EXPECT_EQ(t->tty->rows, 40);
  EXPECT_EQ(t->tty->cols, 132);
  EXPECT_FALSE(t->wait);
  EXPECT_EQ(t->timeout_s, 0);
  EXPECT_EQ(t->max_output_bytes, Limits::kMaxOutputBytes);
  auto sized = ParseExecRequest({{"argv", {"sh"}}, {"tty", true}});
  ASSERT_TRUE(sized.ok());
  EXPECT_EQ(sized->tty->rows, 24);
  EXPECT_EQ(sized->tty->cols, 80);
  // What the request says wins over the interactive defaults.
  auto given = ParseExecRequest({{"argv", {"cat"}},
                                 {"stdin_open", true},
                                 {"wait", true},
                                 {"timeout_s", 5},
                                 {"max_output_bytes", 10}});
  ASSERT_TRUE(given.ok());
  EXPECT_TRUE(given->stdin_open);
  EXPECT_FALSE(given->tty.has_value());
  EXPECT_TRUE(given->wait);
  EXPECT_EQ(given->timeout_s, 5);
  EXPECT_EQ(given->max_output_bytes, 10u);
  // A plain exec keeps the plain defaults.
  auto plain = ParseExecRequest({{"argv", {"true"}}});
  EXPECT_TRUE(plain->wait);
  EXPECT_EQ(plain->timeout_s, 60);
  for (json bad :
       {json{{"argv", {"sh"}}, {"rows", 10}}, json{{"argv", {"sh"}}, {"tty", true}, {"rows", 0}},
        json{{"argv", {"sh"}}, {"tty", true}, {"cols", 1001}},
        json{{"argv", {"sh"}}, {"tty", "yes"}}, json{{"argv", {"sh"}}, {"stdin_open", 1}}}) {
    auto r = ParseExecRequest(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalid) << bad.dump();
  }
}

TEST(ExecInput, TextBytesOrEofAndBounded) {
  EXPECT_EQ(ParseExecInput({{"data", "ls\n"}})->data, "ls\n");
  EXPECT_EQ(ParseExecInput({{"data_b64", "AP8="}})->data, std::string("\0\xff", 2));
  auto eof = ParseExecInput({{"eof", true}});
  ASSERT_TRUE(eof.ok());
  EXPECT_TRUE(eof->eof);
  EXPECT_TRUE(eof->data.empty());
  EXPECT_TRUE(ParseExecInput({{"data", std::string(Limits::kMaxInputBytes, 'x')}}).ok());
  for (json bad : {json::object(), json{{"data", "a"}, {"data_b64", "YQ=="}},
                   json{{"data_b64", "%%"}}, json{{"data", 3}}, json{{"data", "a"}, {"x", 1}},
                   json{{"data", std::string(Limits::kMaxInputBytes + 1, 'x')}}}) {
    EXPECT_EQ(ParseExecInput(bad).status().code(), Code::kInvalid) << bad.dump().substr(0, 80);
  }
}

TEST(Json, MalformedBodiesAreInvalidNotCrashes) {
  EXPECT_EQ(ParseJsonBody("{").status().code(), Code::kInvalid);
  EXPECT_EQ(ParseJsonBody("").status().code(), Code::kInvalid);
  EXPECT_TRUE(ParseJsonBody("{}").ok());
  std::string deep(100000, '[');
  EXPECT_FALSE(ParseJsonBody(deep).ok());
}

}  // namespace
}  // namespace warren::server
