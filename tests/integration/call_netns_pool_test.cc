// The native forker's net namespaces (agent/call_netns_pool.h): made outside the caller's own,
// lent again only if the call left them as new, and no more kept than asked.
#include "agent/call_netns_pool.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "net/netns.h"

namespace warren::agent {
namespace {

ino_t Inode(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return st.st_ino;
}

ino_t OwnNetns() {
  struct stat st {};
  EXPECT_EQ(stat("/proc/thread-self/ns/net", &st), 0);
  return st.st_ino;
}

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

class CallNetnsPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root (CI runs them as root)";
  }
};

TEST_F(CallNetnsPoolTest, AnUntouchedNamespaceIsLentAgainAndTheCallerStaysInItsOwn) {
  const ino_t own = OwnNetns();
  CallNetnsPool pool(4);
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

TEST_F(CallNetnsPoolTest, ANamespaceThatCarriedAPacketIsNot) {
  CallNetnsPool pool(4);
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

TEST_F(CallNetnsPoolTest, NoMoreAreKeptThanAsked) {
  CallNetnsPool pool(1);
  CallNetns a = pool.Take(), b = pool.Take();
  ASSERT_TRUE(a.valid() && b.valid());
  EXPECT_NE(Inode(a.fd()), Inode(b.fd()));
  pool.Give(std::move(a));
  pool.Give(std::move(b));
  EXPECT_EQ(pool.kept(), 1u);
  pool.Give(CallNetns());  // none (the clone made its own): nothing to keep
  EXPECT_EQ(pool.kept(), 1u);
}

}  // namespace
}  // namespace warren::agent
