// The native forker's net and IPC namespaces (agent/call_ns_pool.h): made outside the caller's
// own, lent again only if the call left them as new, and no more kept than asked.
#include "agent/call_ns_pool.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mqueue.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "net/netns.h"

namespace warren::agent {
namespace {

ino_t Inode(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return st.st_ino;
}

ino_t Own(const char* ns) {
  struct stat st {};
  EXPECT_EQ(stat((std::string("/proc/thread-self/ns/") + ns).c_str(), &st), 0);
  return st.st_ino;
}
ino_t OwnNetns() { return Own("net"); }

// A datagram to the discard port over lo, from inside `ns` (lo brought up first, as a call's
// pid 1 does).
void SendOverLo(const CallNetns& ns) {
  ASSERT_TRUE(net::RunInNetns(ns.fd(), [] {
                const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                ifreq lo{};
                strcpy(lo.ifr_name, "lo");
                EXPECT_EQ(ioctl(s, SIOCGIFFLAGS, &lo), 0);
                lo.ifr_flags |= IFF_UP;
                EXPECT_EQ(ioctl(s, SIOCSIFFLAGS, &lo), 0);
                sockaddr_in to{};
                to.sin_family = AF_INET;
                to.sin_port = htons(9);
                inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
                EXPECT_EQ(sendto(s, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to), 1);
                close(s);
                return Status::Ok();
              }).ok());
}

class CallNsPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root (CI runs them as root)";
  }
};

TEST_F(CallNsPoolTest, AnUntouchedNamespaceIsLentAgainAndTheCallerStaysInItsOwn) {
  const ino_t own = OwnNetns();
  CallNetnsPool pool = MakeCallNetnsPool(4);
  CallNetns a = pool.Take();
  ASSERT_TRUE(a.valid());
  const ino_t lent = Inode(a.fd());
  EXPECT_NE(lent, own);
  EXPECT_EQ(OwnNetns(), own);
  pool.Give(std::move(a));
  EXPECT_EQ(pool.kept(), 1u);
  CallNetns again = pool.Take();
  ASSERT_TRUE(again.valid());
  EXPECT_EQ(Inode(again.fd()), lent);
  EXPECT_EQ(pool.made(), 1u);
  EXPECT_EQ(pool.reused(), 1u);
}

TEST_F(CallNsPoolTest, ANamespaceThatCarriedAPacketIsNot) {
  CallNetnsPool pool = MakeCallNetnsPool(4);
  CallNetns a = pool.Take();
  ASSERT_TRUE(a.valid());
  SendOverLo(a);
  pool.Give(std::move(a));
  EXPECT_EQ(pool.kept(), 0u);
  CallNetns next = pool.Take();
  ASSERT_TRUE(next.valid());
  // A freed namespace's inode number can come back on a new one; the count says it is new.
  EXPECT_EQ(pool.made(), 2u);
  EXPECT_EQ(pool.reused(), 0u);
}

TEST_F(CallNsPoolTest, NoMoreAreKeptThanAsked) {
  CallNetnsPool pool = MakeCallNetnsPool(1);
  CallNetns a = pool.Take(), b = pool.Take();
  ASSERT_TRUE(a.valid() && b.valid());
  EXPECT_NE(Inode(a.fd()), Inode(b.fd()));
  pool.Give(std::move(a));
  pool.Give(std::move(b));
  EXPECT_EQ(pool.kept(), 1u);
  pool.Give(CallNetns());  // none (the clone made its own): nothing to keep
  EXPECT_EQ(pool.kept(), 1u);
}

// Runs `use` in a child that joined `ns` (an IPC namespace) and returns its exit status: a
// call's processes are gone when its namespace comes back.
int InIpcns(const CallIpcns& ns, const std::function<int()>& use) {
  const pid_t pid = fork();
  if (pid == 0) _exit(setns(ns.fd(), CLONE_NEWIPC) == 0 ? use() : 99);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Lends one, lets `use` run in it, gives it back: whether the next Take lends it again.
bool IpcnsLentAgainAfter(const std::function<int()>& use) {
  CallIpcnsPool pool = MakeCallIpcnsPool(4);
  CallIpcns ns = pool.Take();
  EXPECT_TRUE(ns.valid());
  if (!ns.valid()) return false;
  const ino_t ino = Inode(ns.fd());
  EXPECT_NE(ino, Own("ipc"));
  EXPECT_EQ(InIpcns(ns, use), 0);
  pool.Give(std::move(ns));
  CallIpcns again = pool.Take();
  return again.valid() && Inode(again.fd()) == ino && pool.reused() == 1;
}

TEST_F(CallNsPoolTest, AnUntouchedIpcNamespaceIsLentAgain) {
  EXPECT_TRUE(IpcnsLentAgainAfter([] { return 0; }));
  // Looking is not making: none is there to find.
  EXPECT_TRUE(
      IpcnsLentAgainAfter([] { return shmget(0x5752, 0, 0) < 0 && errno == ENOENT ? 0 : 1; }));
}

TEST_F(CallNsPoolTest, AnIpcNamespaceWithAnObjectLeftIsNot) {
  EXPECT_FALSE(
      IpcnsLentAgainAfter([] { return shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600) == 0 ? 0 : 1; }));
  EXPECT_FALSE(
      IpcnsLentAgainAfter([] { return semget(IPC_PRIVATE, 1, IPC_CREAT | 0600) == 0 ? 0 : 1; }));
  EXPECT_FALSE(
      IpcnsLentAgainAfter([] { return msgget(IPC_PRIVATE, IPC_CREAT | 0600) == 0 ? 0 : 1; }));
}

TEST_F(CallNsPoolTest, NorOneWhereAnObjectWasMadeAndRemoved) {
  // Nothing is left, but the next object's id would tell that one was made: not lent again.
  EXPECT_FALSE(IpcnsLentAgainAfter([] {
    const int id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    return id == 0 && msgctl(id, IPC_RMID, nullptr) == 0 ? 0 : 1;
  }));
}

TEST_F(CallNsPoolTest, NorOneHoldingAPosixQueue) {
  EXPECT_FALSE(IpcnsLentAgainAfter([] {
    mq_attr attr{};
    attr.mq_maxmsg = 1;
    attr.mq_msgsize = 8;
    const mqd_t q = mq_open("/warren-test", O_CREAT | O_RDWR, 0600, &attr);
    return q == static_cast<mqd_t>(-1) ? 1 : (mq_close(q), 0);
  }));
}

}  // namespace
}  // namespace warren::agent
