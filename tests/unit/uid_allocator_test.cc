#include "isolation/uid_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

namespace warren::isolation {
namespace {

TEST(UidAllocator, RangesAreDisjointAndReturned) {
  UidAllocator a(1u << 20, 4);
  std::set<uint32_t> bases;
  std::vector<UidSlot> slots;
  for (int i = 0; i < 4; ++i) {
    auto s = a.Allocate();
    ASSERT_TRUE(s);
    slots.emplace_back(&a, *s);
    bases.insert(a.RangeOf(*s).host_base);
  }
  EXPECT_EQ(bases.size(), 4u);
  EXPECT_EQ(*bases.begin(), 1u << 20);
  EXPECT_FALSE(a.Allocate());  // all in use: never shared
  slots.pop_back();            // the owner gives its range back
  EXPECT_EQ(a.used(), 3u);
  EXPECT_TRUE(a.Allocate());
  EXPECT_FALSE(a.Claim(0));
}

TEST(UidAllocator, TwoDaemonsNeverShareARange) {
  // Far above the ids node daemons give sandboxes: a block whose ids a process on the host
  // uses is skipped, so sandboxes running on the test's host must not be in the way.
  constexpr uint32_t kBase = 3u << 30;
  char tmpl[] = "/tmp/warren-uids-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  // Removed however the test ends (an ASSERT returns early).
  struct RemoveDir {
    const char* dir;
    ~RemoveDir() { (void)!system((std::string("rm -rf ") + dir).c_str()); }
  } remove{tmpl};
  std::set<uint32_t> seen;
  {
    UidAllocator a(kBase, 256, tmpl), b(kBase, 256, tmpl);
    for (int i = 0; i < 100; ++i) {
      auto sa = a.Allocate(), sb = b.Allocate();
      ASSERT_TRUE(sa && sb);
      EXPECT_TRUE(seen.insert(*sa).second);
      EXPECT_TRUE(seen.insert(*sb).second);
    }
  }
  // Both gone: their blocks are free again.
  UidAllocator c(kBase, 256, tmpl);
  EXPECT_EQ(*c.Allocate(), 0u);
}

}  // namespace
}  // namespace warren::isolation
