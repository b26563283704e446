// The node's bare network namespaces (net/bare_netns_pool.h): one comes back into the pool
// only if nothing in it tells of its last occupant, and only if the node owns it.
#include "net/bare_netns_pool.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <functional>
#include <string>

#include "isolation/netns_pristine.h"
#include "net/netns.h"
#include "sys/pidfd_ns.h"

namespace warren::net {
namespace {

// A UDP socket's address on port 9 (discard) of `ip`.
sockaddr_in Port9(const char* ip) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  inet_pton(AF_INET, ip, &to.sin_addr);
  return to;
}

ino_t Inode(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return st.st_ino;
}

class BareNetnsPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root (CI runs them as root)";
  }
  // No filler thread (target 0): the pool holds only what is given back.
  BareNetnsPool pool_{BareNetnsOptions{.ipv6 = false, .target = 0, .keep = 4}};

  uint64_t Count(const char* key) { return pool_.Info().value(key, uint64_t{0}); }

  // A namespace from the pool, used by `use` (run inside it), then given back: whether the
  // next Take lends the same one again.
  bool LentAgainAfter(const std::function<void()>& use) {
    auto n = pool_.Take();
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok()) return false;
    const ino_t ino = Inode(n->netns.get());
    EXPECT_TRUE(RunInNetns(n->netns.get(), [&] {
                  use();
                  return Status::Ok();
                }).ok());
    pool_.GiveBack(std::move(n->netns));
    auto again = pool_.Take();
    EXPECT_TRUE(again.ok());
    return again.ok() && Inode(again->netns.get()) == ino;
  }
};

TEST_F(BareNetnsPoolTest, AnUntouchedNamespaceIsLentAgainWithANewSysfs) {
  EXPECT_TRUE(LentAgainAfter([] {}));
  EXPECT_EQ(Count("bare_reused"), 1u);
  auto n = pool_.Take();
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(NodeOwnedNetns(n->netns.get()));
  EXPECT_TRUE(n->sysfs.valid());
}

TEST_F(BareNetnsPoolTest, ANamespaceThatCarriedAPacketIsNot) {
  EXPECT_FALSE(LentAgainAfter([] {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to = Port9("127.0.0.1");
    EXPECT_EQ(sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 1);
    close(s);
  }));
  EXPECT_EQ(Count("bare_released"), 1u);
}

// The check's files, opened once in a namespace (the fncall zygote keeps them for each one it
// lends), show it as it is at every later read, from outside it: one found new and then used
// is seen as used.
TEST_F(BareNetnsPoolTest, TheChecksFilesOpenedOnceSeeLaterUse) {
  auto n = pool_.Take();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  warren_netns_probe probe{};
  ASSERT_TRUE(RunInNetns(n->netns.get(), [&] {
                return warren_netns_probe_open("/proc/thread-self/net", &probe) == 0
                           ? Status::Ok()
                           : Status(Code::kInternal, "open the check's files", "", strerror(errno));
              }).ok());
  EXPECT_EQ(warren_netns_probe_pristine(&probe), 1);
  EXPECT_EQ(warren_netns_probe_pristine(&probe), 1);  // read again from the start
  ASSERT_TRUE(RunInNetns(n->netns.get(), [] {
                int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                sockaddr_in to = Port9("127.0.0.1");
                EXPECT_EQ(sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 1);
                close(s);
                return Status::Ok();
              }).ok());
  EXPECT_EQ(warren_netns_probe_pristine(&probe), 0);
  warren_netns_probe_close(&probe);
  for (int fd : probe.fd) EXPECT_EQ(fd, -1);
}

TEST_F(BareNetnsPoolTest, NorOneWhereAConnectFoundNoRoute) {
  // No packet at all, but a counter (OutNoRoutes) a later occupant could read.
  EXPECT_FALSE(LentAgainAfter([] {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to = Port9("10.0.0.1");
    EXPECT_NE(connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    close(s);
  }));
}

TEST_F(BareNetnsPoolTest, NorOneWithASocketLeft) {
  int left = -1;
  EXPECT_FALSE(LentAgainAfter([&] { left = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0); }));
  close(left);
}

TEST_F(BareNetnsPoolTest, NorANamespaceTheNodeDoesNotOwn) {
  // One made inside a user namespace of its own, as a sandbox's root could: its root holds
  // CAP_NET_ADMIN there and could have changed anything the check does not read.
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) _exit(1);
    (void)!write(ready[1], "r", 1);
    (void)!read(done[0], &c, 1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  const std::string path = "/proc/" + std::to_string(child) + "/ns/net";
  UniqueFd theirs(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(theirs.valid());
  EXPECT_FALSE(NodeOwnedNetns(theirs.get()));
  const ino_t ino = Inode(theirs.get());
  pool_.GiveBack(std::move(theirs));
  (void)!write(done[1], "x", 1);
  waitpid(child, nullptr, 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  // Nor the host's own.
  UniqueFd host(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(NodeOwnedNetns(host.get()));
  pool_.GiveBack(std::move(host));
  EXPECT_EQ(Count("bare_reused"), 0u);
  EXPECT_EQ(Count("bare_released"), 2u);
  auto n = pool_.Take();  // made now: the pool kept neither
  ASSERT_TRUE(n.ok());
  EXPECT_NE(Inode(n->netns.get()), ino);
  EXPECT_EQ(Count("bare_misses"), 1u);
}

TEST_F(BareNetnsPoolTest, TheNamespaceOfAProcessComesThroughItsPidfd) {
  auto n = pool_.Take();
  ASSERT_TRUE(n.ok());
  const int ns = n->netns.get();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    if (setns(ns, CLONE_NEWNET) != 0) _exit(1);
    (void)!write(ready[1], "r", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());
  auto got = sys::OpenNetnsOfPidfd(pidfd.get());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Inode(got->get()), Inode(ns));
}

}  // namespace
}  // namespace warren::net
