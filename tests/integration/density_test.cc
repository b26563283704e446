// Density's kernel facilities on the real kernel (root): the node's swap (a zram device, a
// swap file) made, adopted after a stop and removed; an idle cgroup's memory reclaimed and
// paged out into it, and every byte back intact when the process touches it again.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "isolation/cgroup.h"
#include "isolation/cgroup_memory.h"
#include "isolation/node_swap.h"
#include "isolation/page_out.h"
#include "isolation/swap_file.h"
#include "isolation/zram_swap.h"
#include "node/density/density_manager.h"
#include "test_env.h"

namespace warren::isolation {
namespace {

constexpr uint64_t kMiB = 1 << 20;

bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

class NodeSwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    dir_ = testing::MakeScratchDir("swap");
    state_ = dir_ + "/itest-" + std::to_string(getpid()) + ".swap";
  }
  void TearDown() override { testing::RemoveDir(dir_); }
  std::string dir_, state_;
};

TEST_F(NodeSwapTest, ASwapFileIsMadeAdoptedAfterAStopAndDeleted) {
  const std::string path = dir_ + "/swap";
  auto made = SwapFile::Create(path, 64 * kMiB, state_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  SwapStats st;
  ASSERT_TRUE(IsActiveSwap(path, &st));
  EXPECT_GE(st.size_bytes, 63 * kMiB);
  EXPECT_EQ((*made)->Stats().ram_bytes, 0u);  // a file costs no RAM
  struct stat sb {};
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_GE(static_cast<uint64_t>(sb.st_blocks) * 512, 64 * kMiB);  // allocated, no holes

  // A stop with sandboxes' pages in it leaves it on; the next run adopts it.
  (*made)->Detach();
  made->reset();
  ASSERT_TRUE(IsActiveSwap(path));
  auto adopted = AdoptNodeSwap(state_);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ((*adopted)->device(), path);

  Status released = (*adopted)->Release();
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_FALSE(IsActiveSwap(path));
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(state_));
  EXPECT_EQ(AdoptNodeSwap(state_).status().code(), Code::kNotFound);
}

// /proc/swaps names the file by its resolved path: one given through a symlink is still found,
// turned off and deleted (never deleted while still swap).
TEST_F(NodeSwapTest, APathThroughASymlinkIsResolved) {
  ASSERT_EQ(mkdir((dir_ + "/real").c_str(), 0700), 0);
  ASSERT_EQ(symlink("real", (dir_ + "/link").c_str()), 0);
  auto made = SwapFile::Create(dir_ + "/link/../link/swap", 32 * kMiB, state_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  char real[PATH_MAX];
  ASSERT_NE(realpath((dir_ + "/real").c_str(), real), nullptr);
  EXPECT_EQ((*made)->device(), std::string(real) + "/swap");
  EXPECT_TRUE(IsActiveSwap((*made)->device()));
  EXPECT_GE((*made)->Stats().size_bytes, 31 * kMiB);
  EXPECT_TRUE((*made)->Release().ok());
  EXPECT_FALSE(IsActiveSwap(std::string(real) + "/swap"));
  EXPECT_FALSE(Exists(dir_ + "/real/swap"));
}

TEST_F(NodeSwapTest, AFileThatIsNotTheNodesIsNeverTakenOver) {
  const std::string path = dir_ + "/someone-elses";
  std::ofstream(path) << "data the node must not overwrite\n";
  auto made = SwapFile::Create(path, 32 * kMiB, state_);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), Code::kConflict) << made.status().ToString();
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "data the node must not overwrite");
  EXPECT_FALSE(Exists(state_));
}

TEST_F(NodeSwapTest, ItsOwnFileLeftOffByAHostRestartIsMadeAgain) {
  const std::string path = dir_ + "/swap";
  auto made = SwapFile::Create(path, 32 * kMiB, state_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  (*made)->Detach();
  // A restart: swap is off and /run (the state file) is gone; the file is still on disk.
  ASSERT_EQ(swapoff(path.c_str()), 0) << strerror(errno);
  unlink(state_.c_str());
  auto again = SwapFile::Create(path, 32 * kMiB, state_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(IsActiveSwap(path));
  EXPECT_TRUE((*again)->Release().ok());
  EXPECT_FALSE(Exists(path));
}

TEST_F(NodeSwapTest, AFailedCreateLeavesNoFile) {
  // tmpfs cannot hold a swap file: swapon refuses, and the file the node made is gone.
  const std::string tmpfs = dir_ + "/tmpfs";
  ASSERT_EQ(mkdir(tmpfs.c_str(), 0700), 0);
  ASSERT_EQ(mount("tmpfs", tmpfs.c_str(), "tmpfs", 0, "size=64m"), 0) << strerror(errno);
  auto made = SwapFile::Create(tmpfs + "/swap", 32 * kMiB, state_);
  EXPECT_FALSE(made.ok());
  EXPECT_NE(made.status().ToString().find("swap"), std::string::npos);
  EXPECT_FALSE(Exists(tmpfs + "/swap"));
  EXPECT_FALSE(Exists(state_));
  ASSERT_EQ(umount(tmpfs.c_str()), 0);
}

TEST_F(NodeSwapTest, AZramDeviceIsAddedAdoptedAndRemoved) {
  auto made = ZramSwap::Create(64 * kMiB, state_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string device = (*made)->device();
  ASSERT_TRUE(IsActiveSwap(device));
  EXPECT_GE((*made)->Stats().size_bytes, 63 * kMiB);
  EXPECT_EQ((*made)->Stats().used_bytes, 0u);  // the header mkswap wrote is not a page in use
  (*made)->Detach();
  made->reset();
  ASSERT_TRUE(IsActiveSwap(device));
  auto adopted = AdoptNodeSwap(state_);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ((*adopted)->device(), device);
  EXPECT_TRUE((*adopted)->Release().ok());
  EXPECT_FALSE(IsActiveSwap(device));
  EXPECT_FALSE(Exists("/sys/block/" + device.substr(5)));
}

// A node's swap lives as long as the node's density manager, and a stop with nothing in it
// leaves no device and no state file behind (e2e servers stop and start by the dozen).
TEST_F(NodeSwapTest, ANodesEmptySwapGoesWithItsManager) {
  for (auto mode : {node::density::SwapMode::kZram, node::density::SwapMode::kFile}) {
    node::density::DensityOptions opts;
    opts.swap = mode;
    opts.swap_bytes = 64 * kMiB;
    opts.swap_file = dir_ + "/node.swap-file";
    opts.cgroup_parent = "warren-itest-" + std::to_string(getpid());
    opts.state_dir = dir_;
    const std::string state = dir_ + "/" + opts.cgroup_parent + ".swap";
    std::string device;
    {
      auto m = node::density::DensityManager::Start(opts);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      const auto n = (*m)->Node();
      EXPECT_EQ(n.swap_error, "");
      device = n.swap_device;
      ASSERT_FALSE(device.empty());
      EXPECT_TRUE(IsActiveSwap(device));
      EXPECT_TRUE(Exists(state));
    }
    EXPECT_FALSE(IsActiveSwap(device)) << device;
    EXPECT_FALSE(Exists(state));
    if (mode == node::density::SwapMode::kFile) EXPECT_FALSE(Exists(opts.swap_file));
  }
}

// A process holding 96 MiB it wrote and then sleeps on, in a cgroup of its own: reclaim and
// page-out move it into the node's swap, and it reads every byte back as it wrote it.
TEST_F(NodeSwapTest, AnIdleCgroupsMemoryGoesToSwapAndComesBackIntact) {
  auto swap = ZramSwap::Create(256 * kMiB, state_);
  ASSERT_TRUE(swap.ok()) << swap.status().ToString();
  const std::string parent = "warren-itest-" + std::to_string(getpid());
  CgroupLimits lim;
  lim.memory_bytes = 256 * kMiB;
  lim.pids = 8;
  auto cg = Cgroup::Create(parent, "idle", lim);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  const CgroupPaths paths = cg->paths();

  int go[2], done[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(done), 0);
  constexpr size_t kBytes = 96 * kMiB;
  pid_t pid = fork();
  if (pid == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);  // in the cgroup from here
    auto* p = static_cast<unsigned char*>(
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (size_t i = 0; i < kBytes; i++) p[i] = static_cast<unsigned char>(i * 31 + (i >> 12));
    if (write(done[1], "w", 1) != 1) _exit(2);
    if (read(go[0], &c, 1) != 1) _exit(2);  // reclaimed meanwhile
    for (size_t i = 0; i < kBytes; i++)
      if (p[i] != static_cast<unsigned char>(i * 31 + (i >> 12))) _exit(3);
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(cg->Enter(pid).ok());
  ASSERT_EQ(write(go[1], "g", 1), 1);
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1);

  auto before = ReadMemoryUse(paths);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_GE(before->anon_bytes, 90 * kMiB);
  ASSERT_TRUE(SetSwapAllowed(paths, true).ok());
  auto reclaimed = ReclaimTo(paths, 32 * kMiB);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status().ToString();
  auto page_out = PageOutProcess(pid);
  ASSERT_TRUE(page_out.ok()) << page_out.status().ToString();
  auto after = ReadMemoryUse(paths);
  ASSERT_TRUE(after.ok());
  EXPECT_LE(after->resident_bytes, 40 * kMiB) << "before " << before->resident_bytes;
  EXPECT_GE(after->swapped_bytes, 56 * kMiB);
  EXPECT_GE((*swap)->Stats().used_bytes, 56 * kMiB);
  EXPECT_EQ(after->limit_bytes, before->limit_bytes);  // the limit is put back

  ASSERT_EQ(write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(cg->Destroy().ok());
  RemoveCgroupParent(parent);
  EXPECT_TRUE((*swap)->Release().ok());
}

}  // namespace
}  // namespace warren::isolation
