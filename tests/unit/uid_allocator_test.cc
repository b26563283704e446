#include "isolation/uid_allocator.h"

#include <gtest/gtest.h>

#include <set>

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
  char tmpl[] = "/tmp/warren-uids-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::set<uint32_t> seen;
  {
    UidAllocator a(1u << 20, 256, tmpl), b(1u << 20, 256, tmpl);
    for (int i = 0; i < 100; ++i) {
      auto sa = a.Allocate(), sb = b.Allocate();
      ASSERT_TRUE(sa && sb);
      EXPECT_TRUE(seen.insert(*sa).second);
      EXPECT_TRUE(seen.insert(*sb).second);
    }
  }
  // Both gone: their blocks are free again.
  UidAllocator c(1u << 20, 256, tmpl);
  EXPECT_EQ(*c.Allocate(), 0u);
  std::string cmd = std::string("rm -rf ") + tmpl;
  ASSERT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace warren::isolation
