#include "agent/protocol.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include "base/unique_fd.h"

namespace warren::agent {
namespace {

TEST(Protocol, EncodesHeaderAndBinaryPayload) {
  std::string payload("\0\1\2\xff", 4);
  Message m{{{"t", "out"}, {"id", "ex-1"}}, payload};
  auto back = Decode(Encode(m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->header["t"], "out");
  EXPECT_EQ(back->payload, payload);
}

TEST(Protocol, RejectsMalformedMessages) {
  EXPECT_FALSE(Decode("ab").ok());
  EXPECT_FALSE(Decode(std::string("\xff\xff\x00\x00{}", 6)).ok());   // length beyond message
  EXPECT_FALSE(Decode(std::string("\x02\x00\x00\x00{}", 6)).ok());   // no type
  EXPECT_FALSE(Decode(std::string("\x03\x00\x00\x00{x}", 7)).ok());  // not JSON
}

TEST(Protocol, SeqpacketKeepsMessageBoundaries) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  ASSERT_TRUE(Send(a.get(), {{{"t", "ping"}, {"id", "1"}}, std::string(kMaxPayload, 'x')}).ok());
  ASSERT_TRUE(Send(a.get(), {{{"t", "ping"}, {"id", "2"}}, ""}).ok());
  auto m1 = Recv(b.get());
  auto m2 = Recv(b.get());
  ASSERT_TRUE(m1.ok() && m2.ok());
  EXPECT_EQ(m1->payload.size(), kMaxPayload);
  EXPECT_EQ(m2->header["id"], "2");
  EXPECT_FALSE(Send(a.get(), {{{"t", "x"}}, std::string(kMaxMessage, 'x')}).ok());
  a.Reset();
  auto eof = Recv(b.get());
  EXPECT_EQ(eof.status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace warren::agent
