#include "net/bridge_owner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace warren::net {
namespace {

TEST(BridgeOwnerLock, OneHolderAtATimeAndTheFileGoesWithIt) {
  char tmpl[] = "/tmp/warren-owner-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/net.lock";
  {
    auto first = BridgeOwnerLock::Acquire(path);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    // flock is per open file: a second daemon (here, a second open) is refused.
    auto second = BridgeOwnerLock::Acquire(path);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), Code::kConflict);
    EXPECT_NE(second.status().ToString().find("another warren daemon"), std::string::npos);
    BridgeOwnerLock moved = std::move(*first);
    EXPECT_EQ(access(path.c_str(), F_OK), 0);  // the moved-from lock removed nothing
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  // A file a dead owner left (no one holds it) is taken.
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_TRUE(BridgeOwnerLock::Acquire(path).ok());
  rmdir(tmpl);
}

TEST(BridgeOwner, TheAliasNamesTableAndOwnerFile) {
  EXPECT_EQ(BridgeOwnerAlias("/run/warren/warren-1234abcd-net.lock", "warren-1234abcd"),
            "warren-net table=warren-1234abcd owner=/run/warren/warren-1234abcd-net.lock");
  // A link that is not there, or not a bridge of ours, is nobody's to take.
  EXPECT_EQ(InspectBridge("no-such-link").owner, BridgeInspection::Owner::kNotWarren);
  EXPECT_EQ(InspectBridge("../lo").owner, BridgeInspection::Owner::kNotWarren);
  EXPECT_EQ(InspectBridge("lo").owner, BridgeInspection::Owner::kNotWarren);
}

}  // namespace
}  // namespace warren::net
