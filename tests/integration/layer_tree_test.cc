// Root integration test: an overlay upper as a container's holds it on the host (host ids,
// whiteouts, an opaque directory, overlay's own xattrs, hard links) applied onto a workspace
// tree gives one layer tree standing for both, with the layer's own ids.
#include "isolation/layer_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/unique_fd.h"
#include "test_env.h"

namespace warren {
namespace {

constexpr uint32_t kBase = 1 << 20;  // the sandbox's host ids start here

void Write(const std::string& path, const std::string& data, uid_t id = kBase) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << data;
  ASSERT_EQ(lchown(path.c_str(), id, id), 0);
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct stat Lstat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

std::string Xattr(const std::string& path, const char* name) {
  char v[256];
  ssize_t n = lgetxattr(path.c_str(), name, v, sizeof v);
  return n < 0 ? "" : std::string(v, static_cast<size_t>(n));
}

TEST(LayerTree, UpperOverWorkspaceIsOneLayer) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string dir = testing::MakeScratchDir("layer-tree");
  const std::string ws = dir + "/ws", up = dir + "/upper", out = dir + "/out";
  for (const auto& d : {ws, up, out}) std::filesystem::create_directories(d);
  // The workspace layer (ids of its own, from 0): kept, replaced, deleted, a directory
  // replaced whole, and a whiteout of its own (over the image below).
  Write(ws + "/keep", "kept", 0);
  Write(ws + "/change", "old", 0);
  Write(ws + "/gone", "old", 0);
  Write(ws + "/dir/a", "a", 0);
  Write(ws + "/dir/b", "b", 0);
  Write(ws + "/opaque/old", "old", 0);
  ASSERT_EQ(mknod((ws + "/from-image").c_str(), S_IFCHR, makedev(0, 0)), 0);
  // The upper, with host ids: files, a whiteout, an opaque directory, overlay bookkeeping, a
  // hard link, a symlink, a FIFO, a user xattr, a file owned by uid 1000 in the sandbox.
  Write(up + "/change", "new");
  Write(up + "/dir/c", "c", kBase + 1000);
  ASSERT_EQ(chown((up + "/dir").c_str(), kBase, kBase), 0);
  ASSERT_EQ(setxattr((up + "/dir").c_str(), "user.overlay.impure", "y", 1, 0), 0);
  ASSERT_EQ(setxattr((up + "/dir/c").c_str(), "user.overlay.origin", "", 0, 0), 0);
  ASSERT_EQ(setxattr((up + "/dir/c").c_str(), "user.mine", "v", 1, 0), 0);
  ASSERT_EQ(mknod((up + "/gone").c_str(), S_IFCHR, makedev(0, 0)), 0);
  ASSERT_EQ(link((up + "/gone").c_str(), (up + "/dir/b").c_str()), 0);  // whiteouts share one
  Write(up + "/opaque/new", "new");
  ASSERT_EQ(chown((up + "/opaque").c_str(), kBase, kBase), 0);
  ASSERT_EQ(setxattr((up + "/opaque").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  Write(up + "/linked", "both");
  ASSERT_EQ(link((up + "/linked").c_str(), (up + "/dir/linked2").c_str()), 0);
  ASSERT_EQ(symlink("../keep", (up + "/dir/sym").c_str()), 0);
  ASSERT_EQ(lchown((up + "/dir/sym").c_str(), kBase, kBase), 0);
  ASSERT_EQ(mkfifo((up + "/fifo").c_str(), 0640), 0);
  ASSERT_EQ(chown((up + "/fifo").c_str(), kBase, kBase), 0);
  ASSERT_EQ(chmod((up + "/change").c_str(), 04750), 0);

  UniqueFd wsfd(open(ws.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd upfd(open(up.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd outfd(open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  isolation::LayerTreeStats a;
  Status sa = isolation::ApplyLayerTree(wsfd.get(), outfd.get(), {}, &a);
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  isolation::LayerTreeOptions shifted;
  shifted.id_base = kBase;
  isolation::LayerTreeStats b;
  Status sb = isolation::ApplyLayerTree(upfd.get(), outfd.get(), shifted, &b);
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_EQ(b.whiteouts, 2u);

  EXPECT_EQ(Read(out + "/keep"), "kept");
  EXPECT_EQ(Read(out + "/change"), "new");
  EXPECT_EQ(Lstat(out + "/change").st_mode & 07777, 04750u);  // set-id survives the chown
  EXPECT_EQ(Lstat(out + "/change").st_uid, 0u);
  for (const char* w : {"/gone", "/dir/b", "/from-image"}) {
    struct stat st = Lstat(out + w);
    EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) << w;
  }
  EXPECT_NE(Lstat(out + "/gone").st_ino, Lstat(out + "/dir/b").st_ino);  // one each
  EXPECT_EQ(Read(out + "/dir/a"), "a");                                  // merged directory
  EXPECT_EQ(Read(out + "/dir/c"), "c");
  EXPECT_EQ(Lstat(out + "/dir/c").st_uid, 1000u);
  EXPECT_EQ(Xattr(out + "/dir/c", "user.mine"), "v");
  EXPECT_EQ(Xattr(out + "/dir/c", "user.overlay.origin"), "");
  EXPECT_EQ(Xattr(out + "/dir", "user.overlay.impure"), "");
  EXPECT_FALSE(std::filesystem::exists(out + "/opaque/old"));  // replaced whole
  EXPECT_EQ(Read(out + "/opaque/new"), "new");
  EXPECT_EQ(Xattr(out + "/opaque", "user.overlay.opaque"), "y");
  EXPECT_EQ(Xattr(out + "/opaque", "trusted.overlay.opaque"), "y");
  EXPECT_EQ(Lstat(out + "/linked").st_ino, Lstat(out + "/dir/linked2").st_ino);
  EXPECT_EQ(std::filesystem::read_symlink(out + "/dir/sym"), "../keep");
  EXPECT_EQ(Lstat(out + "/dir/sym").st_uid, 0u);
  EXPECT_TRUE(S_ISFIFO(Lstat(out + "/fifo").st_mode));
  EXPECT_EQ(Lstat(out + "/fifo").st_mode & 07777, 0640u);
  std::filesystem::remove_all(dir);
}

TEST(LayerTree, IdsOutsideTheSandboxAreRefusedNamingThePath) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string dir = testing::MakeScratchDir("layer-tree-ids");
  std::filesystem::create_directories(dir + "/up/etc");
  std::filesystem::create_directories(dir + "/out");
  Write(dir + "/up/etc/host-owned", "x", 0);  // id 0 on the host: not the sandbox's
  ASSERT_EQ(chown((dir + "/up/etc").c_str(), kBase, kBase), 0);
  UniqueFd up(open((dir + "/up").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd out(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  isolation::LayerTreeOptions o;
  o.id_base = kBase;
  isolation::LayerTreeStats stats;
  Status r = isolation::ApplyLayerTree(up.get(), out.get(), o, &stats);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), Code::kInvalid);
  EXPECT_NE(r.ToString().find("/etc/host-owned"), std::string::npos) << r.ToString();
  EXPECT_EQ(r.ToString().find(dir), std::string::npos) << "a host path in the error";
  // Skipped paths are not taken at all.
  o.skip = {"/etc/host-owned"};
  std::filesystem::remove_all(dir + "/out/etc");
  EXPECT_TRUE(isolation::ApplyLayerTree(up.get(), out.get(), o, &stats).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/etc/host-owned"));
  std::filesystem::remove_all(dir);
}

TEST(LayerTree, MoreBytesThanTheBoundStopTheApplyWithAQuotaError) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string dir = testing::MakeScratchDir("layer-tree-bound");
  std::filesystem::create_directories(dir + "/up");
  std::filesystem::create_directories(dir + "/out");
  ASSERT_EQ(chown((dir + "/up").c_str(), kBase, kBase), 0);
  Write(dir + "/up/a", std::string(3000, 'a'), kBase);
  Write(dir + "/up/b", std::string(3000, 'b'), kBase);
  UniqueFd up(open((dir + "/up").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd out(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  isolation::LayerTreeOptions o;
  o.id_base = kBase;
  o.max_bytes = 5000;  // one file fits, both do not
  isolation::LayerTreeStats stats;
  Status r = isolation::ApplyLayerTree(up.get(), out.get(), o, &stats);
  EXPECT_EQ(r.code(), Code::kQuota) << r.ToString();
  // The bound counts across calls: a second tree starts from what the first copied.
  std::filesystem::remove_all(dir + "/out");
  std::filesystem::create_directories(dir + "/out");
  UniqueFd out2(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  o.max_bytes = 9000;
  isolation::LayerTreeStats twice;
  EXPECT_TRUE(isolation::ApplyLayerTree(up.get(), out2.get(), o, &twice).ok());
  EXPECT_EQ(isolation::ApplyLayerTree(up.get(), out2.get(), o, &twice).code(), Code::kQuota);
  std::filesystem::remove_all(dir);
}

TEST(LayerTree, OnlyTheSandboxsOwnXattrsAreCarriedAndHolesAreKept) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string dir = testing::MakeScratchDir("layer-tree-xattrs");
  std::filesystem::create_directories(dir + "/ws/kept");
  std::filesystem::create_directories(dir + "/up/kept");
  std::filesystem::create_directories(dir + "/out");
  ASSERT_EQ(chown((dir + "/up").c_str(), kBase, kBase), 0);
  ASSERT_EQ(chown((dir + "/up/kept").c_str(), kBase, kBase), 0);
  // The workspace's directory had a name the occupant removed since.
  ASSERT_EQ(setxattr((dir + "/ws/kept").c_str(), "user.gone", "1", 1, 0), 0);
  Write(dir + "/up/f", "x", kBase);
  for (const char* name : {"user.mine", "trusted.planted", "security.planted"})
    ASSERT_EQ(setxattr((dir + "/up/f").c_str(), name, "v", 1, 0), 0) << name;
  // A file of 1 GiB that holds 4 KiB.
  {
    UniqueFd f(open((dir + "/up/sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(f);
    ASSERT_EQ(pwrite(f.get(), "data", 4, 512 << 20), 4);
    ASSERT_EQ(ftruncate(f.get(), 1 << 30), 0);
    ASSERT_EQ(fchown(f.get(), kBase, kBase), 0);
  }
  UniqueFd ws(open((dir + "/ws").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd up(open((dir + "/up").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd out(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  isolation::LayerTreeStats stats;
  ASSERT_TRUE(isolation::ApplyLayerTree(ws.get(), out.get(), {}, &stats).ok());
  isolation::LayerTreeOptions o;
  o.id_base = kBase;
  Status st = isolation::ApplyLayerTree(up.get(), out.get(), o, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Xattr(dir + "/out/f", "user.mine"), "v");
  EXPECT_EQ(Xattr(dir + "/out/f", "trusted.planted"), "");
  EXPECT_EQ(Xattr(dir + "/out/f", "security.planted"), "");
  EXPECT_EQ(Xattr(dir + "/out/kept", "user.gone"), "");
  struct stat sp = Lstat(dir + "/out/sparse");
  EXPECT_EQ(sp.st_size, 1 << 30);
  EXPECT_LT(sp.st_blocks * 512, 1 << 20) << "the hole was filled";
  // Counted at its apparent size: a bound below it refuses the file before copying it.
  std::filesystem::remove_all(dir + "/out");
  std::filesystem::create_directories(dir + "/out");
  UniqueFd out2(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  o.max_bytes = 100 << 20;
  isolation::LayerTreeStats bounded;
  EXPECT_EQ(isolation::ApplyLayerTree(up.get(), out2.get(), o, &bounded).code(), Code::kQuota);
  std::filesystem::remove_all(dir);
}

TEST(LayerTree, ATreeDeeperThanTheBoundIsRefusedNotWalked) {
  ASSERT_EQ(geteuid(), 0u);
  const std::string dir = testing::MakeScratchDir("layer-tree-deep");
  std::filesystem::create_directories(dir + "/out");
  std::string p = dir + "/up";
  ASSERT_EQ(mkdir(p.c_str(), 0755), 0);
  UniqueFd cur(open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int i = 0; i < 1100; ++i) {  // by fd: the path would pass PATH_MAX
    ASSERT_EQ(mkdirat(cur.get(), "d", 0755), 0);
    cur = UniqueFd(openat(cur.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(cur);
  }
  UniqueFd up(open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd out(open((dir + "/out").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  isolation::LayerTreeStats stats;
  Status st = isolation::ApplyLayerTree(up.get(), out.get(), {}, &stats);
  EXPECT_EQ(st.code(), Code::kInvalid) << st.ToString();
  EXPECT_NE(st.ToString().find("deeper than"), std::string::npos) << st.ToString();
  (void)system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace warren
