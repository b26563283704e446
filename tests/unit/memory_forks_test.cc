// The node's registry of memory forks (node/memory_forks.h): tokens name captures until ended.
#include "node/memory_forks.h"

#include <gtest/gtest.h>

namespace warren::node {
namespace {

TEST(MemoryForks, ATokenNamesItsCaptureAndItsCommandsUntilItEnds) {
  MemoryForks forks;
  auto image = std::make_shared<runtime::vm::MemoryImage>();
  image->ram_mib = 448;
  ExecSpill::Loaded running;
  running.meta = {{"id", "ex-1"}};
  running.frames.push_back({1, "1\n2\n", 4});
  std::vector<ExecSpill::Loaded> execs;
  execs.push_back(std::move(running));
  const std::string token = forks.Add(image, std::move(execs), "sb-1");
  EXPECT_EQ(token.size(), 32u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(forks.Add(image, {}, "sb-2"), token);
  EXPECT_EQ(forks.size(), 2u);

  auto found = forks.Find(token);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ((*found)->image->ram_mib, 448u);
  EXPECT_EQ((*found)->parent, "sb-1");
  ASSERT_EQ((*found)->execs.size(), 1u);
  EXPECT_EQ((*found)->execs[0].frames[0].kept, "1\n2\n");
  // A child being made keeps what it found, even if the fork ends meanwhile.
  forks.End(token);
  EXPECT_EQ(forks.Find(token).status().code(), Code::kNotFound);
  EXPECT_EQ((*found)->image->ram_mib, 448u);
  forks.End(token);  // again: nothing
  forks.Clear();
  EXPECT_EQ(forks.size(), 0u);
}

}  // namespace
}  // namespace warren::node
