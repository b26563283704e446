#include "agent/tar_stream.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "test_files.h"

namespace warren {
namespace {

using agent::TarStreamStats;
using agent::WriteTarStream;

// One entry as libarchive (the host's reader) reads it back.
struct Got {
  std::string path, symlink, hardlink, data;
  mode_t type = 0, perm = 0;
  int64_t size = 0, uid = 0, gid = 0;
  time_t mtime = 0;
  long mtime_nsec = 0;
  unsigned rdevmajor = 0, rdevminor = 0;
  std::map<std::string, std::string> xattrs;
};

std::vector<Got> ReadTar(const std::string& tar) {
  std::vector<Got> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* e;
  int r;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    Got g;
    g.path = archive_entry_pathname(e);
    if (const char* s = archive_entry_symlink(e)) g.symlink = s;
    if (const char* h = archive_entry_hardlink(e)) g.hardlink = h;
    g.type = archive_entry_filetype(e);
    g.perm = archive_entry_perm(e);
    g.size = archive_entry_size(e);
    g.uid = archive_entry_uid(e);
    g.gid = archive_entry_gid(e);
    g.mtime = archive_entry_mtime(e);
    g.mtime_nsec = archive_entry_mtime_nsec(e);
    g.rdevmajor = archive_entry_rdevmajor(e);
    g.rdevminor = archive_entry_rdevminor(e);
    archive_entry_xattr_reset(e);
    const char* name;
    const void* value;
    size_t size;
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
      g.xattrs[name] = std::string(static_cast<const char*>(value), size);
    char buf[8192];
    la_ssize_t n;
    while ((n = archive_read_data(a, buf, sizeof buf)) > 0) g.data.append(buf, n);
    EXPECT_GE(n, 0) << archive_error_string(a);
    out.push_back(std::move(g));
  }
  EXPECT_EQ(r, ARCHIVE_EOF) << archive_error_string(a);
  archive_read_free(a);
  return out;
}

const Got* Find(const std::vector<Got>& entries, const std::string& path) {
  for (const auto& g : entries)
    if (g.path == path) return &g;
  return nullptr;
}

// The entry named `path`; a failure (and an empty entry) when there is none, so a missing
// entry fails its test instead of crashing the suite.
const Got& At(const std::vector<Got>& entries, const std::string& path) {
  static const Got kNone;
  if (const Got* g = Find(entries, path)) return *g;
  ADD_FAILURE() << "no entry " << path;
  return kNone;
}

std::string Xattr(const Got& g, const std::string& name) {
  auto it = g.xattrs.find(name);
  return it == g.xattrs.end() ? "<none>" : it->second;
}

class TarStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeDir("/tmp"); }
  void MakeDir(const std::string& base) {
    std::string tmpl = base + "/warren-tar-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fd_.Reset(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd_.valid());
  }
  // rm: the deep trees here are beyond PATH_MAX, which std::filesystem cannot remove.
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }

  std::string P(const std::string& rel) const { return dir_ + "/" + rel; }
  void File(const std::string& rel, const std::string& data) { testing::WriteFile(P(rel), data); }
  void Dir(const std::string& rel) { ASSERT_EQ(mkdir(P(rel).c_str(), 0750), 0) << rel; }

  std::string Stream(TarStreamStats* stats = nullptr) {
    std::string tar;
    Status st = WriteTarStream(
        fd_.get(),
        [&](std::string_view piece) {
          tar.append(piece);
          return Status::Ok();
        },
        stats);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(tar.size() % 512, 0u);
    return tar;
  }

  // Each entry against the tree it came from.
  void ExpectMatchesTree(const Got& g) {
    SCOPED_TRACE(g.path);
    std::string rel = g.path;
    if (g.type == AE_IFDIR) {
      ASSERT_EQ(rel.back(), '/');
      rel.pop_back();
    }
    struct stat st;
    ASSERT_EQ(lstat(P(rel).c_str(), &st), 0);
    EXPECT_EQ(g.perm, st.st_mode & 07777);
    EXPECT_EQ(g.uid, st.st_uid);
    EXPECT_EQ(g.gid, st.st_gid);
    EXPECT_EQ(g.mtime, st.st_mtim.tv_sec);
    EXPECT_EQ(g.mtime_nsec, st.st_mtim.tv_nsec);
    if (!g.hardlink.empty()) {
      struct stat first;
      ASSERT_EQ(lstat(P(g.hardlink).c_str(), &first), 0);
      EXPECT_EQ(first.st_ino, st.st_ino);
      return;
    }
    EXPECT_EQ(g.type, st.st_mode & S_IFMT);
    if (S_ISREG(st.st_mode)) {
      EXPECT_EQ(g.size, st.st_size);
      EXPECT_EQ(g.data, testing::ReadWholeFile(P(rel)));
    } else if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlink(P(rel).c_str(), target, sizeof target);
      ASSERT_GT(n, 0);
      EXPECT_EQ(g.symlink, std::string(target, n));
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      EXPECT_EQ(g.rdevmajor, major(st.st_rdev));
      EXPECT_EQ(g.rdevminor, minor(st.st_rdev));
    }
  }

  std::string dir_;
  UniqueFd fd_;
};

TEST_F(TarStreamTest, EveryEntryReadsBackWithItsTypeModeTimeAndData) {
  Dir("a");
  Dir("a/b");
  File("a/b/hello.txt", "hello world\n");
  File("a/big.bin", testing::RandomBytes(200 * 1024 + 7, 1));  // several 64 KiB pieces
  File("empty", "");
  File("suid", "#!/bin/sh\n");
  ASSERT_EQ(chmod(P("suid").c_str(), 04755), 0);
  ASSERT_EQ(chmod(P("a/b").c_str(), 01777), 0);
  ASSERT_EQ(symlink("a/b/hello.txt", P("link").c_str()), 0);
  ASSERT_EQ(mkfifo(P("fifo").c_str(), 0640), 0);
  File("mtime", "t");
  const timespec times[2] = {{1700000000, 5}, {1700000001, 123456789}};
  ASSERT_EQ(utimensat(AT_FDCWD, P("mtime").c_str(), times, 0), 0);

  TarStreamStats stats;
  const auto entries = ReadTar(Stream(&stats));
  std::vector<std::string> paths;
  for (const auto& g : entries) paths.push_back(g.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a/", "a/b/", "a/b/hello.txt", "a/big.bin", "empty",
                                             "fifo", "link", "mtime", "suid"}));
  for (const auto& g : entries) ExpectMatchesTree(g);
  EXPECT_EQ(stats.entries, 9u);
  EXPECT_EQ(stats.file_bytes, 12u + 200 * 1024 + 7 + 0 + 1 + 10);

  EXPECT_EQ(At(entries, "a/b/").perm, 01777u);
  EXPECT_EQ(At(entries, "a/b/hello.txt").data, "hello world\n");
  EXPECT_EQ(At(entries, "empty").type, AE_IFREG);
  EXPECT_EQ(At(entries, "empty").size, 0);
  EXPECT_EQ(At(entries, "suid").perm, 04755u);
  EXPECT_EQ(At(entries, "link").type, AE_IFLNK);
  EXPECT_EQ(At(entries, "link").symlink, "a/b/hello.txt");
  EXPECT_EQ(At(entries, "fifo").type, AE_IFIFO);
  EXPECT_EQ(At(entries, "mtime").mtime, 1700000001);
  EXPECT_EQ(At(entries, "mtime").mtime_nsec, 123456789);
}

TEST_F(TarStreamTest, HardLinksAreWrittenOnceAndLinkedAfter) {
  Dir("d");
  File("d/one", "shared data");
  ASSERT_EQ(link(P("d/one").c_str(), P("two").c_str()), 0);
  const auto entries = ReadTar(Stream());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[1].path, "d/one");
  EXPECT_EQ(entries[1].data, "shared data");
  EXPECT_TRUE(entries[1].hardlink.empty());
  EXPECT_EQ(entries[2].path, "two");
  EXPECT_EQ(entries[2].hardlink, "d/one");
  EXPECT_EQ(entries[2].size, 0);
  for (const auto& g : entries) ExpectMatchesTree(g);
}

TEST_F(TarStreamTest, LongNamesAndTargetsGoIntoPaxRecords) {
  const std::string long_name(150, 'n');
  File(long_name, "long");
  std::string deep;
  for (int i = 0; i < 12; ++i) {
    deep += "level_" + std::to_string(10 + i) + "/";
    Dir(deep.substr(0, deep.size() - 1));
  }
  File(deep + "leaf", "leaf data");
  ASSERT_GT(deep.size() + 4, 100u);
  ASSERT_EQ(symlink((deep + "leaf").c_str(), P("to_leaf").c_str()), 0);
  ASSERT_EQ(link(P(deep + "leaf").c_str(), P("zz_leaf").c_str()), 0);
  const std::string bytes_name = std::string(120, 'u') + "\xc3\xa9\xff";  // not even UTF-8
  File(bytes_name, "bytes");

  const auto entries = ReadTar(Stream());
  for (const auto& g : entries) ExpectMatchesTree(g);
  ASSERT_NE(Find(entries, long_name), nullptr);
  EXPECT_EQ(At(entries, long_name).data, "long");
  ASSERT_NE(Find(entries, deep), nullptr);  // the deepest directory, over 100 bytes
  ASSERT_NE(Find(entries, deep + "leaf"), nullptr);
  EXPECT_EQ(At(entries, deep + "leaf").data, "leaf data");
  EXPECT_EQ(At(entries, "to_leaf").symlink, deep + "leaf");
  EXPECT_EQ(At(entries, "zz_leaf").hardlink, deep + "leaf");
  ASSERT_NE(Find(entries, bytes_name), nullptr);
  EXPECT_EQ(At(entries, bytes_name).data, "bytes");
}

TEST_F(TarStreamTest, XattrsAreKeptWithTheirExactBytes) {
  File("x", "data");
  Dir("xd");
  const std::string value("v\0\x01\xff=\n", 6);
  if (setxattr(P("x").c_str(), "user.test", value.data(), value.size(), 0) != 0) {
    ASSERT_TRUE(errno == ENOTSUP || errno == EPERM) << strerror(errno);
    GTEST_SKIP() << "the filesystem under /tmp takes no user xattrs: " << strerror(errno);
  }
  const std::string big(3000, 'b');  // a record of four digits
  ASSERT_EQ(setxattr(P("xd").c_str(), "user.big", big.data(), big.size(), 0), 0);
  const auto entries = ReadTar(Stream());
  ASSERT_NE(Find(entries, "x"), nullptr);
  EXPECT_EQ(Xattr(At(entries, "x"), "user.test"), value);
  EXPECT_EQ(At(entries, "x").data, "data");
  EXPECT_EQ(Xattr(At(entries, "xd/"), "user.big"), big);
}

// Needs root: user.* xattrs cannot be set on a symlink, trusted.* need CAP_SYS_ADMIN.
TEST_F(TarStreamTest, ASymlinksXattrsAreItsOwnNotItsTargets) {
  File("target", "t");
  ASSERT_EQ(symlink("target", P("sl").c_str()), 0);
  if (lsetxattr(P("sl").c_str(), "trusted.mark", "own", 3, 0) != 0)
    GTEST_SKIP() << "no trusted xattrs on a symlink here: " << strerror(errno);
  ASSERT_EQ(setxattr(P("target").c_str(), "trusted.other", "t", 1, 0), 0);
  const auto entries = ReadTar(Stream());
  EXPECT_EQ(At(entries, "sl").xattrs.count("trusted.mark"), 1u);
  EXPECT_EQ(At(entries, "sl").xattrs.count("trusted.other"), 0u);
  EXPECT_EQ(Xattr(At(entries, "target"), "trusted.other"), "t");
}

// Needs root (mknod, chown).
TEST_F(TarStreamTest, DevicesAndLargeIdsAreWrittenWithTheirNumbers) {
  if (mknod(P("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod needs root: " << strerror(errno);
  ASSERT_EQ(mknod(P("whiteout").c_str(), S_IFCHR, makedev(0, 0)), 0);
  ASSERT_EQ(link(P("whiteout").c_str(), P("whiteout2").c_str()), 0);
  ASSERT_EQ(mknod(P("blk").c_str(), S_IFBLK | 0600, makedev(259, 1048575)), 0);
  File("owned", "o");
  ASSERT_EQ(chown(P("owned").c_str(), 3000000, 4000000), 0);
  const auto entries = ReadTar(Stream());
  for (const auto& g : entries) ExpectMatchesTree(g);
  EXPECT_EQ(At(entries, "null").type, AE_IFCHR);
  EXPECT_EQ(At(entries, "blk").type, AE_IFBLK);
  EXPECT_EQ(At(entries, "blk").rdevminor, 1048575u);
  EXPECT_EQ(At(entries, "whiteout2").hardlink, "whiteout");
  EXPECT_EQ(At(entries, "owned").uid, 3000000);
  EXPECT_EQ(At(entries, "owned").gid, 4000000);
}

TEST_F(TarStreamTest, SizesOf8GiBAndMoreGoIntoPaxRecords) {
  const uint64_t size = (8ull << 30) + 1;
  {
    UniqueFd f(open(P("sparse").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_TRUE(f.valid());
    ASSERT_EQ(ftruncate(f.get(), static_cast<off_t>(size)), 0);
  }
  // The header comes in one piece; stopping there spares reading 8 GiB of holes.
  std::string head;
  Status st = WriteTarStream(
      fd_.get(),
      [&](std::string_view piece) {
        head.append(piece);
        return Status(Code::kUnavailable, "send", "", "enough");
      },
      nullptr);
  EXPECT_EQ(st.message(), "enough");
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  ASSERT_EQ(archive_read_open_memory(a, head.data(), head.size()), ARCHIVE_OK);
  archive_entry* e;
  ASSERT_EQ(archive_read_next_header(a, &e), ARCHIVE_OK) << archive_error_string(a);
  EXPECT_STREQ(archive_entry_pathname(e), "sparse");
  EXPECT_EQ(static_cast<uint64_t>(archive_entry_size(e)), size);
  archive_read_free(a);
}

TEST_F(TarStreamTest, SocketsAreLeftOut) {
  File("file", "f");
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = P("sock");
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const auto entries = ReadTar(Stream());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].path, "file");
}

TEST_F(TarStreamTest, ASinkErrorStopsTheWalkAndIsReturned) {
  for (int i = 0; i < 20; ++i) File("f" + std::to_string(i), "data");
  int calls = 0;
  Status st = WriteTarStream(
      fd_.get(),
      [&](std::string_view) {
        return ++calls == 3 ? Status(Code::kUnavailable, "send", "host", "connection lost")
                            : Status::Ok();
      },
      nullptr);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_EQ(st.op(), "send");
  EXPECT_EQ(st.message(), "connection lost");
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

// Past 64 levels a directory's fd is closed while its subdirectory is walked and reopened
// through "..": the entries after the deep chain are still there, and few fds were open.
TEST_F(TarStreamTest, DeepTreesAreWalkedWithFewFds) {
  std::string deep;
  for (int i = 0; i < 100; ++i) {
    deep += "d/";
    Dir(deep.substr(0, deep.size() - 1));
  }
  File(deep + "leaf", "bottom");
  File("d/z", "after the chain");
  File("z", "last");
  const int before = OpenFds();
  int most = 0;
  std::string tar;
  Status st = WriteTarStream(
      fd_.get(),
      [&](std::string_view piece) {
        most = std::max(most, OpenFds());
        tar.append(piece);
        return Status::Ok();
      },
      nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(most - before, 80);
  const auto entries = ReadTar(tar);
  EXPECT_EQ(entries.size(), 100u + 3);
  ASSERT_NE(Find(entries, deep + "leaf"), nullptr);
  EXPECT_EQ(At(entries, deep + "leaf").data, "bottom");
  EXPECT_EQ(At(entries, "d/z").data, "after the chain");
  EXPECT_EQ(entries.back().path, "z");
}

// On tmpfs where there is one: removing 4,100 nested directories from this host's ext4 (online
// discard) takes 14 s.
class DeepTarStreamTest : public TarStreamTest {
 protected:
  void SetUp() override { MakeDir(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"); }
};

TEST_F(DeepTarStreamTest, ATreeDeeperThan4096LevelsIsAnError) {
  UniqueFd at(dup(fd_.get()));
  for (int i = 0; i < 4100; ++i) {
    ASSERT_EQ(mkdirat(at.get(), "d", 0755), 0);
    at.Reset(openat(at.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(at.valid());
  }
  Status st = WriteTarStream(
      fd_.get(), [](std::string_view) { return Status::Ok(); }, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalid);
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.object().rfind("d/d/", 0), 0u);  // relative, never the host's path
}

}  // namespace
}  // namespace warren
