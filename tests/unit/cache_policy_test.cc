// The package cache's rules: which registry an answer belongs to, its key, how long metadata
// serves unasked; the collapsed fetch's hand-over from a leader to its followers; and the
// store's revalidation and growing-body reads.
#include "net/cache_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "net/fetch_flights.h"
#include "net/mirror_peers.h"
#include "net/package_cache.h"

namespace warren::net {
namespace {

// What npm 9 sends for a packument, and what pip sends for a simple page.
constexpr std::string_view kNpmAccept =
    "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*";
constexpr std::string_view kPipAccept =
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, "
    "text/html; q=0.01";

TEST(CachePolicyTest, NamesTheRegistryOfEachKindOfFile) {
  struct Case {
    std::string_view path;
    RequestHints hints;
    CacheKind kind;
    Registry registry;
    bool by_accept;
  } cases[] = {
      {"/debian/pool/main/h/hello/hello_2.10-3_amd64.deb",
       {},
       CacheKind::kImmutable,
       Registry::kApt,
       false},
      {"/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/ab12",
       {},
       CacheKind::kImmutable,
       Registry::kApt,
       false},
      {"/debian/dists/bookworm/InRelease", {}, CacheKind::kIndex, Registry::kApt, false},
      {"/debian/dists/bookworm/main/binary-amd64/Packages.xz",
       {},
       CacheKind::kIndex,
       Registry::kApt,
       false},
      {"/packages/xx/requests-2.31.0-py3-none-any.whl",
       {},
       CacheKind::kImmutable,
       Registry::kPypi,
       false},
      {"/packages/xx/requests-2.31.0.tar.gz", {}, CacheKind::kImmutable, Registry::kPypi, false},
      {"/simple/requests/", {kPipAccept}, CacheKind::kIndex, Registry::kPypi, true},
      {"/pypi/requests/json", {}, CacheKind::kIndex, Registry::kPypi, false},
      {"/pypi/requests/2.31.0/json", {}, CacheKind::kIndex, Registry::kPypi, false},
      {"/left-pad/-/left-pad-1.3.0.tgz", {}, CacheKind::kImmutable, Registry::kNpm, false},
      {"/express", {kNpmAccept}, CacheKind::kIndex, Registry::kNpm, true},
      {"/express",
       {"", "npm/9.2.0 node/v18.19.0 linux x64"},
       CacheKind::kIndex,
       Registry::kNpm,
       true},
      {"/@types%2fnode", {"application/json", "", true}, CacheKind::kIndex, Registry::kNpm, true},
      {"/@types/node", {kNpmAccept}, CacheKind::kIndex, Registry::kNpm, true},
      // Not npm's: a one-segment path from any other client is no packument.
      {"/express", {"*/*", "curl/7.88"}, CacheKind::kNone, Registry::kOther, false},
      {"/-/v1/search", {kNpmAccept}, CacheKind::kNone, Registry::kOther, false},
      {"/express/4.19.2", {kNpmAccept}, CacheKind::kNone, Registry::kOther, false},
      {"/index.html", {}, CacheKind::kNone, Registry::kOther, false},
      {"/x.deb?token=1", {}, CacheKind::kNone, Registry::kOther, false},
      {"/express?write=true", {kNpmAccept}, CacheKind::kNone, Registry::kOther, false},
  };
  for (const Case& c : cases) {
    CacheClass got = ClassifyRequest(c.path, c.hints);
    EXPECT_EQ(got.kind, c.kind) << c.path;
    if (c.kind != CacheKind::kNone) EXPECT_EQ(got.registry, c.registry) << c.path;
    EXPECT_EQ(got.keyed_by_accept, c.by_accept) << c.path;
  }
  EXPECT_EQ(ClassifyForCache("/debian/dists/bookworm/InRelease"), CacheKind::kIndex);
}

TEST(CachePolicyTest, KeysByAcceptOnlyWhereAnswersVaryByIt) {
  const CacheClass packument{CacheKind::kIndex, Registry::kNpm, true};
  const CacheClass deb{CacheKind::kImmutable, Registry::kApt, false};
  const std::string url = "https://registry.npmjs.org:443/express";
  EXPECT_EQ(CacheKey(url, deb, "text/html"), url);
  EXPECT_NE(CacheKey(url, packument, kNpmAccept), CacheKey(url, packument, "application/json"));
  // Spacing and case are the same Accept.
  EXPECT_EQ(CacheKey(url, packument, "Application/JSON;q=0.8, */*"),
            CacheKey(url, packument, "application/json; q=0.8,*/*"));
  EXPECT_EQ(CacheKey(url, packument, kNpmAccept).rfind(url, 0), 0u);
}

TEST(CachePolicyTest, FreshnessIsPerRegistryAndNeverLongerThanUpstreamSays) {
  FreshnessWindows w;
  EXPECT_EQ(FreshForMs(w, Registry::kNpm, ""), 60'000);
  EXPECT_EQ(FreshForMs(w, Registry::kApt, "public"), 120'000);
  EXPECT_EQ(FreshForMs(w, Registry::kOther, ""), 0);
  EXPECT_EQ(FreshForMs(w, Registry::kNpm, "public, max-age=300"), 60'000);
  EXPECT_EQ(FreshForMs(w, Registry::kNpm, "public, max-age=5"), 5'000);
  EXPECT_EQ(FreshForMs(w, Registry::kPypi, "s-maxage=10, max-age=600"), 10'000);
  EXPECT_EQ(FreshForMs(w, Registry::kPypi, "no-cache"), 0);
  EXPECT_EQ(FreshForMs(w, Registry::kPypi, "max-age=junk"), 60'000);

  auto all = FreshnessWindows::Parse("30");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (Registry r : kAllRegistries) EXPECT_EQ(all->For(r), 30'000) << RegistryName(r);
  auto some = FreshnessWindows::Parse(" npm=2s, pypi=500ms,apt=5m ");
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  EXPECT_EQ(some->npm_ms, 2'000);
  EXPECT_EQ(some->pypi_ms, 500);
  EXPECT_EQ(some->apt_ms, 300'000);
  EXPECT_EQ(some->other_ms, 0);
  EXPECT_TRUE(FreshnessWindows::Parse("").ok());
  for (const char* bad : {"npm", "cargo=10", "npm=-1", "npm=10h", "ten", "npm=99999999999999999m"})
    EXPECT_FALSE(FreshnessWindows::Parse(bad).ok()) << bad;
}

TEST(FetchFlightsTest, FollowersJoinTheLeadersFetchAndHearItsEnd) {
  FetchFlights flights;
  bool leader = false;
  auto a = flights.Join("k", &leader);
  EXPECT_TRUE(leader);
  auto b = flights.Join("k", &leader);
  EXPECT_FALSE(leader);
  EXPECT_EQ(a, b);
  EXPECT_EQ(flights.in_flight(), 1u);
  auto other = flights.Join("other", &leader);
  EXPECT_TRUE(leader);

  CacheEntry seen;
  EXPECT_EQ(b->WaitForAnswer(10, &seen), Flight::Seen::kTimedOut);
  std::thread follower([&] {
    CacheEntry meta;
    ASSERT_EQ(b->WaitForAnswer(10'000, &meta), Flight::Seen::kStreaming);
    EXPECT_EQ(meta.size, 10u);
    uint64_t have = 0;
    bool finished = false, stored = false;
    while (!finished) have = b->WaitForBytes(have, 10'000, &finished, &stored);
    EXPECT_EQ(have, 10u);
    EXPECT_TRUE(stored);
  });
  {
    Leading lead(&flights, "k", a);
    CacheEntry meta;
    meta.size = 10;
    lead->Streaming(meta, nullptr);
    lead->Wrote(4);
    lead->Wrote(10);
    lead.MarkStored();
  }
  follower.join();
  // Ended: the next miss leads a new flight.
  auto c = flights.Join("k", &leader);
  EXPECT_TRUE(leader);
  EXPECT_NE(c, a);
  flights.End("k", c, false);
  EXPECT_EQ(c->WaitForAnswer(0, &seen), Flight::Seen::kFinished);
  EXPECT_FALSE(c->stored());
  flights.End("other", other, false);
  EXPECT_EQ(flights.in_flight(), 0u);
}

TEST(MirrorPeersTest, RendezvousSpreadsKeysAndMovesOnlyALeavingNodesOnes) {
  const std::vector<std::string> three = {"n0", "n1", "n2"};
  std::map<size_t, int> per_node;
  int moved = 0, kept = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string key = "https://registry.npmjs.org:443/pkg-" + std::to_string(i);
    const size_t owner = RendezvousOwner(key, three);
    ++per_node[owner];
    // The same answer whatever the order the nodes are listed in.
    EXPECT_EQ(three[owner], std::vector<std::string>(
                                {"n2", "n0", "n1"})[RendezvousOwner(key, {"n2", "n0", "n1"})]);
    // n1 leaves: only its keys move.
    const std::vector<std::string> two = {"n0", "n2"};
    const std::string after = two[RendezvousOwner(key, two)];
    if (three[owner] == "n1")
      ++moved;
    else if (after == three[owner])
      ++kept;
    else
      ADD_FAILURE() << key << " moved from " << three[owner] << " to " << after;
  }
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_GT(per_node[n], 850) << n;  // about a third each
    EXPECT_LT(per_node[n], 1150) << n;
  }
  EXPECT_EQ(moved + kept, 3000);
  EXPECT_EQ(RendezvousOwner("k", {"only"}), 0u);
}

class PackageCacheStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("warren-cache-test-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(PackageCacheStoreTest, ABodyIsReadAsItGrowsAndRevalidationKeepsIt) {
  PackageCache cache(dir_.string(), 1 << 20);
  ASSERT_TRUE(cache.Init().ok());
  const std::string key = "http://pkg.test:80/simple/x/\naccept: text/html";
  auto w = cache.Begin(key);
  ASSERT_TRUE(w);
  auto reader = w->OpenReader();
  ASSERT_TRUE(reader && *reader);
  ASSERT_TRUE(w->Append("hello ", 6));
  char buf[16] = {};
  EXPECT_EQ(pread(reader->get(), buf, sizeof buf, 0), 6);
  ASSERT_TRUE(w->Append("world", 5));
  EXPECT_FALSE(cache.Lookup(key).has_value());  // not before it is committed
  CacheEntry meta;
  meta.key = key;
  meta.kind = CacheKind::kIndex;
  meta.registry = Registry::kPypi;
  meta.validated_ms = 1000;
  meta.size = 11;
  meta.headers["ETag"] = "\"v1\"";
  ASSERT_TRUE(w->Commit(meta));
  EXPECT_EQ(pread(reader->get(), buf, sizeof buf, 0), 11);  // the same file, renamed
  auto e = cache.Lookup(key);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->registry, Registry::kPypi);
  EXPECT_EQ(e->validated_ms, 1000);
  cache.Revalidated(*e, 5000);
  auto again = cache.Lookup(key);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->validated_ms, 5000);
  EXPECT_EQ(again->headers["ETag"], "\"v1\"");
  EXPECT_EQ(again->size, 11u);
  // A revalidation of a copy replaced meanwhile does not put the old metadata back.
  auto w2 = cache.Begin(key);
  ASSERT_TRUE(w2 && w2->Append("new", 3));
  meta.size = 3;
  meta.validated_ms = 6000;
  meta.headers["ETag"] = "\"v2\"";
  ASSERT_TRUE(w2->Commit(meta));
  cache.Revalidated(*again, 7000);
  auto now = cache.Lookup(key);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->headers["ETag"], "\"v2\"");
  EXPECT_EQ(now->validated_ms, 6000);
  EXPECT_EQ(now->size, 3u);
  EXPECT_EQ(cache.entries(), 1u);
  // Nothing but the entry's two files is left behind.
  size_t files = 0;
  for (auto& f : std::filesystem::directory_iterator(dir_)) {
    (void)f;
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

}  // namespace
}  // namespace warren::net
