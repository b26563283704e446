// GET /v1/sandboxes's filters and pages: every match exactly once, in creation order, across
// pages of a 100,000-sandbox listing, while sandboxes come and go between pages.
#include "server/sandbox_query.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>

namespace warren::server {
namespace {

using runtime::BackendKind;

SandboxRecord Record(int i) {
  SandboxRecord r;
  char id[32], at[40];
  snprintf(id, sizeof id, "sb-%06x", (i * 7919) % 1000003);  // ids not in creation order
  // Ten sandboxes a millisecond: ties on created_at are broken by id.
  snprintf(at, sizeof at, "2026-12-06T%02d:%02d:%02d.%03dZ", i / 36000000 % 24, i / 600000 % 60,
           i / 10000 % 60, i / 10 % 1000);
  r.id = id;
  r.owner = i % 2 ? "alice" : "bob";
  r.created_at = at;
  r.state = i % 5 ? SandboxState::kRunning : SandboxState::kPaused;
  r.spec.backend = i % 3 ? BackendKind::kContainer : BackendKind::kFncall;
  r.spec.image = i % 4 ? "py:3.11" : "node:20";
  r.spec.labels = {{"job", "rl-" + std::to_string(i % 10)}};
  return r;
}

std::vector<const SandboxRecord*> Pointers(const std::vector<SandboxRecord>& all) {
  std::vector<const SandboxRecord*> out;
  for (const auto& r : all) out.push_back(&r);
  return out;
}

SandboxQuery Parse(const std::map<std::string, std::string>& p) {
  auto q = ParseSandboxQuery(p);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  return q.ok() ? *q : SandboxQuery{};
}

TEST(SandboxQueryTest, BadParametersAreRefusedByName) {
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"limit", "0"},
                                                        {"limit", "1001"},
                                                        {"limit", "ten"},
                                                        {"limit", "5x"},
                                                        {"page_token", "not-a-token"},
                                                        {"backend", "docker"},
                                                        {"state", "bogus"},
                                                        {"label", "novalue"},
                                                        {"colour", "red"}}) {
    auto q = ParseSandboxQuery({{k, v}});
    ASSERT_FALSE(q.ok()) << k << "=" << v;
    EXPECT_EQ(q.status().code(), Code::kInvalid);
    EXPECT_NE(q.status().ToString().find(k == "colour"    ? "colour"
                                         : v == "novalue" ? "KEY"
                                                          : k),
              std::string::npos)
        << q.status().ToString();
  }
}

TEST(SandboxQueryTest, FiltersCombine) {
  std::vector<SandboxRecord> all;
  for (int i = 0; i < 600; ++i) all.push_back(Record(i));
  auto page = SelectPage(Pointers(all), Parse({{"backend", "fncall"},
                                               {"image", "node:20"},
                                               {"state", "paused"},
                                               {"label", "job=rl-0"}}));
  // i % 3 == 0, i % 4 == 0, i % 5 == 0, i % 10 == 0: multiples of 60.
  EXPECT_EQ(page.total, 10u);
  ASSERT_EQ(page.items.size(), 10u);
  for (const auto* sb : page.items) EXPECT_EQ(sb->spec.labels.at("job"), "rl-0");
  EXPECT_TRUE(page.next_page_token.empty());
  EXPECT_EQ(SelectPage(Pointers(all), Parse({{"state", "deleted"}})).total, 0u);
}

TEST(SandboxQueryTest, PagesOfAHundredThousandGiveEveryMatchOnceInCreationOrder) {
  std::vector<SandboxRecord> all;
  for (int i = 0; i < 100000; ++i) all.push_back(Record(i));
  // The store's order is not creation order (etcd lists by key).
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.id < b.id; });
  const auto candidates = Pointers(all);

  std::map<std::string, std::string> params{{"label", "job=rl-3"}, {"limit", "1000"}};
  std::set<std::string> seen;
  std::string last_at, last_id;
  size_t pages = 0;
  for (;;) {
    auto page = SelectPage(candidates, Parse(params));
    EXPECT_EQ(page.total, 10000u);
    for (const auto* sb : page.items) {
      EXPECT_EQ(sb->spec.labels.at("job"), "rl-3");
      EXPECT_TRUE(seen.insert(sb->id).second) << sb->id << " twice";
      EXPECT_LT(std::tie(last_at, last_id), std::tie(sb->created_at, sb->id));
      last_at = sb->created_at;
      last_id = sb->id;
    }
    ++pages;
    if (page.next_page_token.empty()) break;
    EXPECT_EQ(page.items.size(), 1000u);
    params["page_token"] = page.next_page_token;
  }
  EXPECT_EQ(pages, 10u);
  EXPECT_EQ(seen.size(), 10000u);
}

TEST(SandboxQueryTest, APageResumesWhereItStoppedWhileSandboxesComeAndGo) {
  std::vector<SandboxRecord> all;
  for (int i = 0; i < 30; ++i) all.push_back(Record(i));
  auto first = SelectPage(Pointers(all), Parse({{"limit", "10"}}));
  ASSERT_EQ(first.items.size(), 10u);
  const std::string last_of_first = first.items.back()->id;
  const std::string token = first.next_page_token;
  // The record the token names goes, one already listed goes, and a new one comes.
  std::erase_if(all, [&](const SandboxRecord& r) {
    return r.id == last_of_first || r.id == first.items[0]->id;
  });
  SandboxRecord late = Record(1000);
  late.created_at = "2026-12-07T00:00:00.000Z";
  all.push_back(late);

  std::set<std::string> rest;
  std::map<std::string, std::string> params{{"limit", "10"}, {"page_token", token}};
  for (;;) {
    auto page = SelectPage(Pointers(all), Parse(params));
    for (const auto* sb : page.items) rest.insert(sb->id);
    if (page.next_page_token.empty()) break;
    params["page_token"] = page.next_page_token;
  }
  EXPECT_EQ(rest.size(), 21u);  // the 20 not listed yet, then the new one
  EXPECT_TRUE(rest.count(late.id));
  EXPECT_FALSE(rest.count(last_of_first));
}

}  // namespace
}  // namespace warren::server
