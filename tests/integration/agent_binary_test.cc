// The node's file of the agent (runtime/container/agent_binary.h): what sandboxes execute.
#include "runtime/container/agent_binary.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "agent/vm_init.h"

namespace warren::runtime {
namespace {

class AgentBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root (CI runs them as root)";
    auto fd = LoadAgent(WARREN_AGENT_PATH, &how_);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    agent_ = std::move(*fd);
  }
  std::string how_;
  UniqueFd agent_;
};

TEST_F(AgentBinaryTest, AsRootItIsAloneOnAReadOnlyHugePageTmpfsOfItsOwn) {
  EXPECT_EQ(how_.rfind("on a tmpfs of its own with huge pages", 0), 0u) << how_;
  // Nothing can write it: not through its fd's path (the mount is read-only), not as root.
  const std::string self = "/proc/self/fd/" + std::to_string(agent_.get());
  errno = 0;
  EXPECT_LT(open(self.c_str(), O_WRONLY | O_CLOEXEC), 0);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_LT(open(self.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC), 0);
  EXPECT_EQ(errno, EROFS);
  EXPECT_NE(fchmod(agent_.get(), 0777), 0);
  // Its name, as a sandbox's /proc/1/exe shows it, is no host path.
  char buf[256];
  ssize_t n = readlink(self.c_str(), buf, sizeof buf - 1);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "/warren-agent");
}

TEST_F(AgentBinaryTest, HoldsOnlyWhatAnExecLoadsAndRuns) {
  struct stat file, held;
  ASSERT_EQ(stat(WARREN_AGENT_PATH, &file), 0);
  ASSERT_EQ(fstat(agent_.get(), &held), 0);
  // The build's agent carries its symbols and debug information after its segments.
  EXPECT_LT(held.st_size, file.st_size);
  Elf64_Ehdr eh;
  ASSERT_EQ(pread(agent_.get(), &eh, sizeof eh, 0), static_cast<ssize_t>(sizeof eh));
  Elf64_Phdr ph[64];
  ASSERT_LE(eh.e_phnum, 64);
  ASSERT_EQ(pread(agent_.get(), ph, eh.e_phnum * sizeof(Elf64_Phdr), eh.e_phoff),
            static_cast<ssize_t>(eh.e_phnum * sizeof(Elf64_Phdr)));
  uint64_t end = 0;
  for (int i = 0; i < eh.e_phnum; ++i)
    if (ph[i].p_type == PT_LOAD) {
      end = std::max<uint64_t>(end, ph[i].p_offset + ph[i].p_filesz);
      // Linked for huge pages: every segment starts on a 2 MiB boundary of the file and memory.
      EXPECT_EQ(ph[i].p_align, 2u << 20) << "segment " << i;
    }
  EXPECT_EQ(static_cast<uint64_t>(held.st_size), end);

  // And it runs, as a sandbox's first process runs it.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char arg0[] = "warren-agent", arg1[64];
    snprintf(arg1, sizeof arg1, "%s", agent::kWarmExecFlag);
    char* argv[] = {arg0, arg1, nullptr};
    char* envp[] = {nullptr};
    syscall(SYS_execveat, agent_.get(), "", argv, envp, AT_EMPTY_PATH);
    _exit(127);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

}  // namespace
}  // namespace warren::runtime
