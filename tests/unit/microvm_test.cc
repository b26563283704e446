// Unit tests of the microvm backend's pieces that need no QEMU: the guest module order, the
// agent frame relay over a byte stream, the accelerator choice.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "agent/frame_relay.h"
#include "agent/protocol.h"
#include "base/unique_fd.h"
#include "runtime/vm/accel_probe.h"
#include "runtime/vm/guest_image.h"
#include "runtime/vm/qemu_keys.h"
#include "runtime/vm/qmp_screen.h"

namespace warren {
namespace {

using runtime::vm::ModuleLoadOrder;

constexpr const char* kDep =
    "kernel/drivers/virtio/virtio_ring.ko:\n"
    "kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko "
    "kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko "
    "kernel/drivers/virtio/virtio_ring.ko\n"
    "kernel/fs/erofs/erofs.ko: kernel/lib/libcrc32c.ko\n"
    "kernel/lib/libcrc32c.ko:\n";
constexpr const char* kBuiltin =
    "kernel/lib/lz4/lz4_decompress.ko\nkernel/fs/overlayfs/overlay.ko\n";

TEST(GuestModules, DependenciesComeFirstAndOnce) {
  auto order = ModuleLoadOrder({"virtio_blk", "virtio-rng", "erofs"}, kDep, kBuiltin);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  std::vector<std::string> want = {"kernel/drivers/virtio/virtio_ring.ko",
                                   "kernel/drivers/virtio/virtio.ko",
                                   "kernel/drivers/block/virtio_blk.ko",
                                   "kernel/drivers/char/hw_random/virtio-rng.ko",
                                   "kernel/lib/libcrc32c.ko",
                                   "kernel/fs/erofs/erofs.ko"};
  EXPECT_EQ(*order, want);
}

TEST(GuestModules, BuiltinOnesAreSkippedAndUnknownOnesNamed) {
  auto order = ModuleLoadOrder({"overlay"}, kDep, kBuiltin);
  ASSERT_TRUE(order.ok());
  EXPECT_TRUE(order->empty());
  auto missing = ModuleLoadOrder({"virtio_net"}, kDep, kBuiltin);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().ToString().find("virtio_net"), std::string::npos);
}

// A relay between a packet socket pair and a stream socket pair, as the node and guest run it.
struct RelayRig {
  UniqueFd packet_user, packet_relay, stream_user, stream_relay;
  std::thread thread;
  Status result;
  RelayRig() {
    int p[2], s[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, p), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    packet_user.Reset(p[0]), packet_relay.Reset(p[1]), stream_user.Reset(s[0]),
        stream_relay.Reset(s[1]);
    thread = std::thread(
        [this] { result = agent::RelayFrames(stream_relay.get(), packet_relay.get()); });
  }
  std::string ReadStream(size_t n) {
    std::string out;
    while (out.size() < n) {
      char buf[65536];
      ssize_t r = read(stream_user.get(), buf, std::min(sizeof buf, n - out.size()));
      if (r <= 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    return out;
  }
  ~RelayRig() {
    stream_user.Reset();
    packet_user.Reset();
    if (thread.joinable()) thread.join();
  }
};

TEST(FrameRelay, PacketsBecomeFramesAndBack) {
  RelayRig rig;
  agent::Message big{{{"t", "out"}, {"id", "ex-1"}}, std::string(agent::kMaxPayload, 'x')};
  ASSERT_TRUE(agent::Send(rig.packet_user.get(), agent::Message{{{"t", "hello"}}, ""}).ok());
  ASSERT_TRUE(agent::Send(rig.packet_user.get(), big).ok());
  const std::string a = agent::FrameForStream(agent::Encode(agent::Message{{{"t", "hello"}}, ""}));
  const std::string b = agent::FrameForStream(agent::Encode(big));
  EXPECT_EQ(rig.ReadStream(a.size() + b.size()), a + b);

  // The other way, written one byte at a time: message boundaries come back whole.
  const std::string wire =
      agent::FrameForStream(agent::Encode(agent::Message{{{"t", "setup"}}, "abc"})) +
      agent::FrameForStream(agent::Encode(big));
  std::thread writer([&] {
    for (char c : wire) ASSERT_EQ(write(rig.stream_user.get(), &c, 1), 1);
  });
  auto m1 = agent::Recv(rig.packet_user.get());
  auto m2 = agent::Recv(rig.packet_user.get());
  writer.join();
  ASSERT_TRUE(m1.ok() && m2.ok());
  EXPECT_EQ(m1->header["t"], "setup");
  EXPECT_EQ(m1->payload, "abc");
  EXPECT_EQ(m2->payload, big.payload);
}

TEST(FrameRelay, OversizedFrameIsAnErrorNotAnAllocation) {
  RelayRig rig;
  const char huge[4] = {'\xff', '\xff', '\xff', '\x7f'};  // ~2 GiB announced
  ASSERT_EQ(write(rig.stream_user.get(), huge, 4), 4);
  rig.thread.join();
  EXPECT_FALSE(rig.result.ok());
  EXPECT_NE(rig.result.ToString().find("agent stream"), std::string::npos);
}

TEST(FrameRelay, EndsCleanlyWhenTheStreamCloses) {
  RelayRig rig;
  rig.stream_user.Reset();
  rig.thread.join();
  EXPECT_TRUE(rig.result.ok()) << rig.result.ToString();
  // Its owner then closes the packet end (the node's thread, the guest's relay process), and
  // the agent connection sees the end.
  rig.packet_relay.Reset();
  EXPECT_FALSE(agent::Recv(rig.packet_user.get()).ok());
}

TEST(FrameRelay, ASyncBetweenFramesIsANoOp) {
  RelayRig rig;
  const std::string wire = std::string(agent::kSyncFrame) +
                           agent::FrameForStream(agent::Encode(agent::Message{{{"t", "a"}}, ""})) +
                           std::string(agent::kSyncFrame) +
                           agent::FrameForStream(agent::Encode(agent::Message{{{"t", "b"}}, ""}));
  ASSERT_EQ(write(rig.stream_user.get(), wire.data(), wire.size()),
            static_cast<ssize_t>(wire.size()));
  auto a = agent::Recv(rig.packet_user.get());
  auto b = agent::Recv(rig.packet_user.get());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->header["t"], "a");
  EXPECT_EQ(b->header["t"], "b");
}

TEST(FrameRelay, AwaitSyncSkipsWhatAnEarlierSessionLeft) {
  int s[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
  UniqueFd a(s[0]), b(s[1]);
  // Half a frame of the old session, the sync split across two writes, then a new frame.
  const std::string frame =
      agent::FrameForStream(agent::Encode(agent::Message{{{"t", "resumed"}}, ""}));
  const std::string sync(agent::kSyncFrame);
  std::string first = frame.substr(3) + sync.substr(0, 7), second = sync.substr(7) + frame;
  ASSERT_EQ(write(b.get(), first.data(), first.size()), static_cast<ssize_t>(first.size()));
  std::thread later([&] {
    usleep(20000);
    ASSERT_EQ(write(b.get(), second.data(), second.size()), static_cast<ssize_t>(second.size()));
  });
  auto rest = agent::AwaitSync(a.get(), -1, 5000);
  later.join();
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  // What followed the sync (possibly only part of it yet) starts the new frame.
  EXPECT_EQ(frame.compare(0, rest->size(), *rest), 0);
  EXPECT_FALSE(rest->empty());
}

TEST(AccelProbe, ForcedTcgAndAProbedChoiceWithAReason) {
  auto forced = runtime::vm::ChooseAccel("tcg");
  EXPECT_EQ(forced.accel, "tcg");
  auto probed = runtime::vm::ChooseAccel("");
  EXPECT_TRUE(probed.accel == "kvm" || probed.accel == "tcg");
  EXPECT_FALSE(probed.reason.empty());
  if (probed.accel == "kvm") {
    EXPECT_GE(probed.kvm_loop_ms, 0);
  }
}

}  // namespace
// A whole VM's keyboard as QEMU names its keys: the US layout, Shift where it needs it.
TEST(QemuKeys, CharactersAndKeysymsOnTheUsLayout) {
  using runtime::vm::KeyForChar;
  using runtime::vm::KeyForKeysym;
  auto is = [](std::optional<runtime::vm::QemuKey> k, const char* qcode, bool shift) {
    return k && k->qcode == qcode && k->shift == shift;
  };
  EXPECT_TRUE(is(KeyForChar('a'), "a", false));
  EXPECT_TRUE(is(KeyForChar('Q'), "q", true));
  EXPECT_TRUE(is(KeyForChar('7'), "7", false));
  EXPECT_TRUE(is(KeyForChar('&'), "7", true));
  EXPECT_TRUE(is(KeyForChar('$'), "4", true));
  EXPECT_TRUE(is(KeyForChar('>'), "dot", true));
  EXPECT_TRUE(is(KeyForChar('~'), "grave_accent", true));
  EXPECT_TRUE(is(KeyForChar(' '), "spc", false));
  EXPECT_TRUE(is(KeyForChar('\n'), "ret", false));
  EXPECT_FALSE(KeyForChar(U'\u00e9'));  // no key for it: refused, not guessed
  EXPECT_FALSE(KeyForChar(0x7f));
  EXPECT_TRUE(is(KeyForKeysym(0xff0d), "ret", false));   // Return
  EXPECT_TRUE(is(KeyForKeysym(0xffe3), "ctrl", false));  // Control_L
  EXPECT_TRUE(is(KeyForKeysym(0xffc9), "f12", false));   // F12
  EXPECT_TRUE(is(KeyForKeysym('S'), "s", true));
  EXPECT_FALSE(KeyForKeysym(0x10020ac));  // the euro sign
}

// The screen's devices: its size as the preferred mode, and room for two frames of it.
TEST(QmpScreen, DevicesNameTheSizeAndEnoughVideoMemory) {
  auto small = runtime::vm::QmpScreen::Devices({800, 600});
  ASSERT_EQ(small.size(), 3u);
  EXPECT_NE(small[0].find("bochs-display,"), std::string::npos);
  EXPECT_NE(small[0].find("xres=800,yres=600"), std::string::npos);
  EXPECT_NE(small[0].find("vgamem=16777216"), std::string::npos);
  EXPECT_NE(runtime::vm::QmpScreen::Devices({3840, 2160})[0].find("vgamem=67108864"),
            std::string::npos);
  EXPECT_EQ(small[1].rfind("virtio-tablet-pci", 0), 0u);
  EXPECT_EQ(small[2].rfind("virtio-keyboard-pci", 0), 0u);
}

}  // namespace warren
