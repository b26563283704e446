// UidAllocator across daemons: a block whose lock is free but whose ids a process still runs
// with (the sandboxes of a daemon that was killed) is not taken by another daemon.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolation/uid_allocator.h"

namespace warren::isolation {
namespace {

TEST(UidBlocksTest, ABlockAnotherDaemonsSandboxesStillUseIsSkipped) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  char dir[] = "/tmp/warren-uid-blocks-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  // Ids far above any daemon's: 3.9e9 and up, two blocks of 64 slots.
  const uint32_t base = 3900000000u;
  // A process left running in block 0 (as a killed daemon's sandbox would be).
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t left = fork();
  ASSERT_GE(left, 0);
  if (left == 0) {
    const long id = base + 12345;
    if (syscall(SYS_setresgid, id, id, id) != 0 || syscall(SYS_setresuid, id, id, id) != 0)
      _exit(1);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  {
    UidAllocator other(base, 2 * UidAllocator::kBlockSlots, dir);
    auto slot = other.Allocate();
    ASSERT_TRUE(slot.has_value());
    EXPECT_GE(*slot, UidAllocator::kBlockSlots)
        << "took a block whose ids a process still runs with";
  }
  kill(left, SIGKILL);
  waitpid(left, nullptr, 0);
  // Once nothing runs there, the block is free for anyone.
  {
    UidAllocator other(base, 2 * UidAllocator::kBlockSlots, dir);
    auto slot = other.Allocate();
    ASSERT_TRUE(slot.has_value());
    EXPECT_LT(*slot, UidAllocator::kBlockSlots);
  }
  close(ready[0]);
  close(ready[1]);
  std::string cmd = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace warren::isolation
