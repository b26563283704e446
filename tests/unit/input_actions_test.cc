// The desktop's input: a client's actions checked and turned into steps, key combinations, and
// the steps' way to the agent and back.
#include "server/input_actions.h"

#include <gtest/gtest.h>

#include "agent/desktop_messages.h"
#include "server/api_types.h"

namespace warren::server {
namespace {

using agent::InputStep;
using nlohmann::json;
using K = InputStep::Kind;
constexpr agent::DisplaySize kScreen{1024, 768};

TEST(InputActions, ClickDragScrollKeyTypeBecomeSteps) {
  auto steps = ParseInputActions(
      {{"actions",
        {{{"type", "click"}, {"x", 10}, {"y", 20}, {"button", "right"}, {"count", 2}},
         {{"type", "drag"}, {"from", {0, 0}}, {"to", {100, 50}}},
         {{"type", "scroll"}, {"dy", -2}},
         {{"type", "key"}, {"keys", "ctrl+shift+t"}},
         {{"type", "type"}, {"text", "h\u00e9\n"}},
         {{"type", "wait"}, {"ms", 10}}}}},
      kScreen);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  const auto& s = *steps;
  // click: a move, then press and release twice, of button 3.
  ASSERT_GE(s.size(), 5u);
  EXPECT_EQ(s[0].kind, K::kMove);
  EXPECT_EQ(s[0].x, 10);
  EXPECT_EQ(s[0].y, 20);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(s[i].kind, K::kButton);
    EXPECT_EQ(s[i].button, 3);
    EXPECT_EQ(s[i].down, i % 2 == 1);
  }
  // drag: move, press, a midpoint, the end, release.
  EXPECT_EQ(s[5].kind, K::kMove);
  EXPECT_TRUE(s[6].down);
  EXPECT_EQ(s[7].x, 50);
  EXPECT_EQ(s[8].x, 100);
  EXPECT_FALSE(s[9].down);
  // scroll up 2: button 4 pressed and released twice, with no move (no point given).
  EXPECT_EQ(s[10].button, 4);
  EXPECT_EQ(s[13].button, 4);
  EXPECT_EQ(s[14].kind, K::kKeys);
  EXPECT_EQ(s[14].keysyms, (std::vector<uint32_t>{0xffe3, 0xffe1, 't'}));
  EXPECT_EQ(s[15].kind, K::kText);
  EXPECT_EQ(s[15].text, std::u32string(U"h\u00e9\n"));
  EXPECT_EQ(s[16].ms, 10u);
}

TEST(InputActions, ABadActionIsNamedByIndexAndType) {
  auto bad = [](json actions) {
    auto r = ParseInputActions({{"actions", actions}}, kScreen);
    EXPECT_EQ(r.status().code(), Code::kInvalid) << actions.dump();
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad({{{"type", "move"}, {"x", 1}, {"y", 1}}, {{"type", "fly"}}}).find("action 1 (fly)"),
            std::string::npos);
  EXPECT_NE(bad({{{"type", "click"}, {"x", 1024}, {"y", 0}}}).find("action 0 (click)"),
            std::string::npos);
  EXPECT_NE(bad({{{"type", "click"}, {"button", "fourth"}}}).find("button"), std::string::npos);
  EXPECT_NE(bad({{{"type", "key"}, {"keys", "ctrl+nosuchkey"}}}).find("nosuchkey"),
            std::string::npos);
  EXPECT_NE(bad({{{"type", "move"}, {"x", 1}}}).find("`y`"), std::string::npos);
  EXPECT_NE(bad({{{"type", "move"}, {"x", 1}, {"y", 1}, {"z", 1}}}).find("`z`"), std::string::npos);
  EXPECT_NE(bad({{{"type", "type"}, {"text", std::string(20000, 'a')}}}).find("characters"),
            std::string::npos);
  EXPECT_NE(bad({{{"type", "type"}, {"text", "\xff"}}}).find("UTF-8"), std::string::npos);
  EXPECT_NE(bad({{{"type", "wait"}, {"ms", 60000}}}).find("ms"), std::string::npos);
  EXPECT_NE(bad({{{"type", "wait"}, {"ms", 5000}},
                 {{"type", "wait"}, {"ms", 5000}},
                 {{"type", "wait"}, {"ms", 1}}})
                .find("action 2 (wait)"),
            std::string::npos);
  EXPECT_NE(bad({{{"type", "scroll"}}}).find("dx"), std::string::npos);
  EXPECT_NE(bad({{{"type", "drag"}, {"from", {1}}, {"to", {2, 2}}}}).find("from"),
            std::string::npos);
  EXPECT_NE(bad(json::array()).find("actions"), std::string::npos);
  EXPECT_NE(bad({json("click")}).find("action 0"), std::string::npos);
  EXPECT_FALSE(
      ParseInputActions({{"actions", {{{"type", "wait"}, {"ms", 1}}}}, {"x", 1}}, kScreen).ok());
}

TEST(KeyCombo, NamesAliasesCaseAndThePlusKey) {
  EXPECT_EQ(*ParseKeyCombo("Return"), (std::vector<uint32_t>{0xff0d}));
  EXPECT_EQ(*ParseKeyCombo("enter"), (std::vector<uint32_t>{0xff0d}));
  EXPECT_EQ(*ParseKeyCombo("ALT+F4"), (std::vector<uint32_t>{0xffe9, 0xffc1}));
  EXPECT_EQ(*ParseKeyCombo("0xffe3+0x63"), (std::vector<uint32_t>{0xffe3, 0x63}));  // VNC
  EXPECT_FALSE(ParseKeyCombo("0x0").ok());
  EXPECT_FALSE(ParseKeyCombo("0x1234567890").ok());
  EXPECT_EQ(*ParseKeyCombo("ctrl++"), (std::vector<uint32_t>{0xffe3, '+'}));
  EXPECT_EQ(*ParseKeyCombo("S"), (std::vector<uint32_t>{'S'}));
  for (const char* bad : {"", "ctrl+", "+x+", "ctrl+bogus", "a+b+c+d+e+f+g+h+i"})
    EXPECT_FALSE(ParseKeyCombo(bad).ok()) << bad;
}

TEST(InputSteps, TravelToTheAgentAndBackAndAreCheckedThere) {
  auto steps = ParseInputActions({{"actions",
                                   {{{"type", "click"}, {"x", 5}, {"y", 6}},
                                    {{"type", "key"}, {"keys", "ctrl+s"}},
                                    {{"type", "type"}, {"text", "\u00fc\U0001F600"}},
                                    {{"type", "wait"}, {"ms", 3}}}}},
                                 kScreen);
  ASSERT_TRUE(steps.ok());
  auto back = agent::ParseInputSteps(agent::InputStepsToJson(*steps));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), steps->size());
  for (size_t i = 0; i < steps->size(); ++i) {
    EXPECT_EQ((*back)[i].kind, (*steps)[i].kind);
    EXPECT_EQ((*back)[i].x, (*steps)[i].x);
    EXPECT_EQ((*back)[i].keysyms, (*steps)[i].keysyms);
    EXPECT_EQ((*back)[i].text, (*steps)[i].text);
    EXPECT_EQ((*back)[i].ms, (*steps)[i].ms);
  }
  // What the agent refuses whoever sends it.
  for (json bad :
       {json::object(), json{{{"k", "jump"}}}, json{{{"k", "button"}, {"b", 9}, {"down", true}}},
        json{{{"k", "move"}, {"x", -1}, {"y", 0}}}, json{{{"k", "wait"}, {"ms", 10000}}},
        json{{{"k", "text"}, {"t", "\xc3"}}}, json{{{"k", "keys"}, {"ks", json::array()}}}})
    EXPECT_FALSE(agent::ParseInputSteps(bad).ok()) << bad.dump();
}

TEST(SandboxSpec, DisplayIsSizedAndOnlyWhereAScreenCanBe) {
  auto s = ParseSandboxSpec({{"image", "a:b"}, {"display", {{"width", 1280}, {"height", 800}}}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->display.has_value());
  EXPECT_EQ(s->display->width, 1280);
  EXPECT_EQ(ToJson(*s)["display"], json({{"width", 1280}, {"height", 800}}));
  EXPECT_TRUE(ToJson(*ParseSandboxSpec({{"image", "a:b"}}))["display"].is_null());
  for (const char* backend : {"microvm", "vm"})
    EXPECT_TRUE(ParseSandboxSpec({{"image", "a:b"},
                                  {"backend", backend},
                                  {"display", {{"width", 640}, {"height", 480}}}})
                    .ok())
        << backend;
  for (json bad : {json{{"image", "a:b"}, {"display", {{"width", 10}, {"height", 800}}}},
                   json{{"image", "a:b"}, {"display", {{"width", 800}}}},
                   json{{"image", "a:b"}, {"display", {{"width", 800}, {"height", 600}, {"d", 1}}}},
                   json{{"image", "a:b"}, {"display", "800x600"}},
                   json{{"image", "a:b"},
                        {"backend", "fncall"},
                        {"display", {{"width", 800}, {"height", 600}}}}})
    EXPECT_EQ(ParseSandboxSpec(bad).status().code(), Code::kInvalid) << bad.dump();
}

}  // namespace
}  // namespace warren::server
