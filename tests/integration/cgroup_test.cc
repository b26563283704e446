// Cgroup::Enter: a running process (a warm microVM's QEMU) moves into another sandbox's
// cgroup, in every hierarchy, and the one it left can be removed.
#include "isolation/cgroup.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace warren::isolation {
namespace {

std::string CgroupOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(CgroupTest, EnterMovesARunningProcessEverywhere) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  const std::string parent = "warren-itest-" + std::to_string(getpid());
  CgroupLimits lim;
  lim.memory_bytes = 64 << 20;
  lim.pids = 16;
  lim.cpus = 0.5;
  auto from = Cgroup::Create(parent, "warm-a", lim);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  auto to = Cgroup::Create(parent, "sb-b", lim);
  ASSERT_TRUE(to.ok()) << to.status().ToString();
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(from->Enter(pid).ok());
  EXPECT_NE(CgroupOf(pid).find("/warm-a"), std::string::npos) << CgroupOf(pid);
  Status st = to->Enter(pid);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const std::string now = CgroupOf(pid);
  EXPECT_EQ(now.find("/warm-a"), std::string::npos) << now;
  EXPECT_NE(now.find("/sb-b"), std::string::npos) << now;
  if (to->v2_fd() >= 0) EXPECT_TRUE(to->Holds(pid));  // a host with a cgroup2 tree
  // The group it left is empty: it can go while the process lives on.
  EXPECT_TRUE(from->Destroy().ok());
  for (const auto& d : from->dirs()) EXPECT_NE(access(d.c_str(), F_OK), 0) << d;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(to->Destroy().ok());
  RemoveCgroupParent(parent);
}

int Entries(const std::string& dir, const std::string& prefix) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

TEST(CgroupTest, FinishedMemoryCgroupsAreReusedUnlessStillCharged) {
  ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
  if (access("/sys/fs/cgroup/memory/cgroup.procs", F_OK) != 0)
    GTEST_SKIP() << "memory cgroups are reused on cgroup v1 hierarchies only (this host has none)";
  const std::string parent = "warren-itest-reuse-" + std::to_string(getpid());
  const std::string mem = "/sys/fs/cgroup/memory/" + parent;
  CgroupLimits lim;
  lim.memory_bytes = 128 << 20;
  auto a = Cgroup::Create(parent, "sb-a", lim);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->Destroy().ok());
  EXPECT_EQ(Entries(mem, "sb-a"), 0);
  EXPECT_EQ(Entries(mem, "idle-"), 1);  // kept, under a name of no sandbox

  lim.memory_bytes = 96 << 20;
  auto b = Cgroup::Create(parent, "sb-b", lim);  // takes it back, with the new limits
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(Entries(mem, "idle-"), 0);
  std::ifstream limit(mem + "/sb-b/commands/memory.limit_in_bytes");
  uint64_t v = 0;
  limit >> v;
  EXPECT_EQ(v, 96u << 20);

  // A process charges 32 MiB to sb-b, then moves on (as a warm microVM's QEMU does): sb-b
  // keeps the charge, so it is removed rather than handed to the next sandbox.
  auto c = Cgroup::Create(parent, "sb-c", CgroupLimits{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char x;
    if (read(go[0], &x, 1) != 1) _exit(1);
    const size_t size = 32 << 20;
    volatile char* block = static_cast<volatile char*>(
        mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (block == MAP_FAILED) _exit(1);
    for (size_t i = 0; i < size; i += 4096) block[i] = 1;
    if (write(done[1], "d", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(b->Enter(pid).ok());
  char x;
  ASSERT_EQ(write(go[1], "g", 1), 1);
  ASSERT_EQ(read(done[0], &x, 1), 1);
  ASSERT_TRUE(c->Enter(pid).ok());
  ASSERT_TRUE(b->Destroy().ok());
  EXPECT_EQ(Entries(mem, "sb-b"), 0);
  EXPECT_EQ(Entries(mem, "idle-"), 0);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(c->Destroy().ok());
  RemoveCgroupParent(parent);
  EXPECT_NE(access(mem.c_str(), F_OK), 0);  // idle ones included, nothing stays
  for (int fd : {go[0], go[1], done[0], done[1]}) close(fd);
}

}  // namespace
}  // namespace warren::isolation
