// Cgroup::Enter: a running process (a warm microVM's QEMU) moves into another sandbox's
// cgroup, in every hierarchy, and the one it left can be removed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "isolation/cgroup.h"

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

}  // namespace
}  // namespace warren::isolation
