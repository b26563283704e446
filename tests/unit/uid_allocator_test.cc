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

}  // namespace
}  // namespace warren::isolation
