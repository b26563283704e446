// The node's file of the agent (runtime/container/agent_binary.h): what sandboxes execute.
#include "runtime/container/agent_binary.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mount.h>
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
  EXPECT_EQ(how_.rfind("on a tmpfs of its own", 0), 0u) << how_;
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
  // Its mount cannot be cloned (a clone's own read-only flag could be cleared): its fd is gone.
  errno = 0;
  int clone = open_tree(AT_FDCWD, self.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  EXPECT_LT(clone, 0);
  if (clone >= 0) close(clone);
  // The copy names no section headers: they are not in it.
  Elf64_Ehdr eh;
  ASSERT_EQ(pread(agent_.get(), &eh, sizeof eh, 0), static_cast<ssize_t>(sizeof eh));
  EXPECT_EQ(eh.e_shoff, 0u);
  EXPECT_EQ(eh.e_shnum, 0u);
}

// Runs `agent` as a sandbox's first process would, with --warm-exec: 0 if it ran and exited 0.
int RunWarmExec(int agent) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    char arg0[] = "warren-agent", arg1[64];
    snprintf(arg1, sizeof arg1, "%s", agent::kWarmExecFlag);
    char* argv[] = {arg0, arg1, nullptr};
    char* envp[] = {nullptr};
    syscall(SYS_execveat, agent, "", argv, envp, AT_EMPTY_PATH);
    _exit(127);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST_F(AgentBinaryTest, WithoutThePrivilegeToMountItIsASealedMemfdThatRuns) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // No CAP_SYS_ADMIN: fsopen fails, as for a node that may not mount.
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0) _exit(10);
    data[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
    data[CAP_TO_INDEX(CAP_SYS_ADMIN)].permitted &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
    if (syscall(SYS_capset, &hdr, data) != 0) _exit(11);
    std::string how;
    auto fd = LoadAgent(WARREN_AGENT_PATH, &how);
    if (!fd.ok()) _exit(12);
    if (how.rfind("in a sealed memfd", 0) != 0) _exit(13);
    const int seals = fcntl(fd->get(), F_GET_SEALS);
    const int want = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;
    if (seals < 0 || (seals & want) != want) _exit(14);
    if (write(fd->get(), "x", 1) >= 0) _exit(15);
    _exit(RunWarmExec(fd->get()) == 0 ? 0 : 16);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st)) << st;
  // 12: no agent at all; 13: not the memfd; 14: not sealed; 15: writable; 16: did not run.
  EXPECT_EQ(WEXITSTATUS(st), 0);
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
  EXPECT_EQ(RunWarmExec(agent_.get()), 0);
}

}  // namespace
}  // namespace warren::runtime
