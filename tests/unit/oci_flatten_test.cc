// The OCI flattener and reference parsing: pure functions over tar files, no root needed.
#include "image/oci_flatten.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "image/registry_client.h"
#include "image/tar_extract.h"

namespace warren::image {
namespace {

struct Entry {
  std::string path;
  char type = 'f';   // f file, d dir, l symlink, h hardlink, c char device
  std::string data;  // file content, or link target
  mode_t mode = 0644;
};

class FlattenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/warren-flatten-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  std::string Layer(const std::vector<Entry>& entries, bool gzip = true) {
    std::string path = dir_ + "/layer" + std::to_string(n_++) + (gzip ? ".tar.gz" : ".tar");
    std::unique_ptr<archive, decltype(&archive_write_free)> a(archive_write_new(),
                                                              archive_write_free);
    archive_write_set_format_pax_restricted(a.get());
    if (gzip) archive_write_add_filter_gzip(a.get());
    EXPECT_EQ(archive_write_open_filename(a.get(), path.c_str()), ARCHIVE_OK);
    for (const auto& e : entries) {
      archive_entry* ae = archive_entry_new();
      archive_entry_set_pathname(ae, e.path.c_str());
      archive_entry_set_perm(ae, e.mode);
      switch (e.type) {
        case 'f':
          archive_entry_set_filetype(ae, AE_IFREG);
          archive_entry_set_size(ae, static_cast<la_int64_t>(e.data.size()));
          break;
        case 'd':
          archive_entry_set_filetype(ae, AE_IFDIR);
          break;
        case 'l':
          archive_entry_set_filetype(ae, AE_IFLNK);
          archive_entry_set_symlink(ae, e.data.c_str());
          break;
        case 'h':
          archive_entry_set_filetype(ae, AE_IFREG);
          archive_entry_set_hardlink(ae, e.data.c_str());
          break;
        case 'c':
          archive_entry_set_filetype(ae, AE_IFCHR);
          archive_entry_set_rdevmajor(ae, 1);
          archive_entry_set_rdevminor(ae, 3);
          break;
      }
      EXPECT_EQ(archive_write_header(a.get(), ae), ARCHIVE_OK);
      if (e.type == 'f' && !e.data.empty())
        archive_write_data(a.get(), e.data.data(), e.data.size());
      archive_entry_free(ae);
    }
    archive_write_close(a.get());
    return path;
  }

  // path -> "type:content-or-target"
  std::map<std::string, std::string> Flatten(const std::vector<std::string>& layers) {
    std::string out = dir_ + "/out" + std::to_string(n_++) + ".tar";
    auto st = FlattenLayers(layers, out);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    std::map<std::string, std::string> got;
    std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), archive_read_free);
    archive_read_support_format_all(a.get());
    EXPECT_EQ(archive_read_open_filename(a.get(), out.c_str(), 65536), ARCHIVE_OK);
    archive_entry* e;
    while (archive_read_next_header(a.get(), &e) == ARCHIVE_OK) {
      std::string p = archive_entry_pathname(e), v;
      if (p.size() > 1 && p.back() == '/') p.pop_back();  // tar writes directories as "d/"
      EXPECT_EQ(got.count(p), 0u) << "written twice: " << p;
      if (const char* hl = archive_entry_hardlink(e)) {
        v = std::string("h:") + hl;
      } else if (archive_entry_filetype(e) == AE_IFDIR) {
        v = "d";
      } else if (archive_entry_filetype(e) == AE_IFLNK) {
        v = std::string("l:") + archive_entry_symlink(e);
      } else if (archive_entry_filetype(e) == AE_IFCHR) {
        v = "c:" + std::to_string(archive_entry_rdevmajor(e)) + "," +
            std::to_string(archive_entry_rdevminor(e));
      } else {
        std::string data(static_cast<size_t>(archive_entry_size(e)), '\0');
        if (!data.empty()) archive_read_data(a.get(), data.data(), data.size());
        v = "f:" + data;
      }
      got[p] = v;
    }
    return got;
  }

  std::string dir_;
  int n_ = 0;
};

TEST_F(FlattenTest, UpperWinsAndWhiteoutsDelete) {
  auto l1 = Layer({{"etc", 'd'},
                   {"etc/a", 'f', "a1"},
                   {"etc/b", 'f', "b1"},
                   {"etc/gone", 'f', "x"},
                   {"var/d", 'd'},
                   {"var/d/x", 'f', "x"}});
  auto l2 = Layer({{"etc/a", 'f', "a2"}, {"etc/.wh.gone", 'f'}, {"var/.wh.d", 'f'}});
  auto got = Flatten({l1, l2});
  EXPECT_EQ(got["etc/a"], "f:a2");
  EXPECT_EQ(got["etc/b"], "f:b1");
  EXPECT_EQ(got.count("etc/gone"), 0u);
  EXPECT_EQ(got.count("var/d"), 0u);
  EXPECT_EQ(got.count("var/d/x"), 0u);
  for (auto& [p, v] : got) EXPECT_EQ(p.find(".wh."), std::string::npos) << p;
}

TEST_F(FlattenTest, OpaqueDirHidesOnlyLowerContent) {
  auto l1 = Layer({{"d", 'd'}, {"d/old", 'f', "o"}, {"d/sub", 'd'}, {"d/sub/deep", 'f', "o"}});
  auto l2 = Layer({{"d", 'd'}, {"d/.wh..wh..opq", 'f'}, {"d/new", 'f', "n"}});
  auto got = Flatten({l1, l2});
  EXPECT_EQ(got["d"], "d");
  EXPECT_EQ(got["d/new"], "f:n");
  EXPECT_EQ(got.count("d/old"), 0u);
  EXPECT_EQ(got.count("d/sub/deep"), 0u);
}

TEST_F(FlattenTest, FileReplacingDirHidesItsChildrenAndViceVersa) {
  auto l1 = Layer({{"x", 'd'}, {"x/child", 'f', "c"}, {"y", 'f', "file"}});
  auto l2 = Layer({{"x", 'f', "now a file"}, {"y", 'd'}, {"y/inside", 'f', "i"}});
  auto got = Flatten({l1, l2});
  EXPECT_EQ(got["x"], "f:now a file");
  EXPECT_EQ(got.count("x/child"), 0u);
  EXPECT_EQ(got["y"], "d");
  EXPECT_EQ(got["y/inside"], "f:i");
}

TEST_F(FlattenTest, HardLinkKeepsDataWhenUpperReplacesItsTarget) {
  auto l1 = Layer(
      {{"bin", 'd'}, {"bin/a", 'f', "old"}, {"bin/b", 'h', "bin/a"}, {"bin/c", 'h', "bin/a"}});
  auto l2 = Layer({{"bin/a", 'f', "new"}});
  auto got = Flatten({l1, l2});
  EXPECT_EQ(got["bin/a"], "f:new");
  EXPECT_EQ(got["bin/b"], "f:old");  // the first visible link carries the data
  EXPECT_EQ(got["bin/c"], "h:bin/b");
}

TEST_F(FlattenTest, LinksDevicesAndModesPassThrough) {
  auto l1 = Layer({{"usr/bin/su", 'f', "su", 04755},
                   {"lib", 'l', "usr/lib"},
                   {"dev/null", 'c'},
                   {"usr/bin/su2", 'h', "usr/bin/su"}},
                  /*gzip=*/false);
  auto got = Flatten({l1});
  EXPECT_EQ(got["lib"], "l:usr/lib");
  EXPECT_EQ(got["dev/null"], "c:1,3");
  EXPECT_EQ(got["usr/bin/su2"], "h:usr/bin/su");
}

TEST_F(FlattenTest, EscapingPathsAreRefused) {
  auto bad = Layer({{"../../etc/passwd", 'f', "x"}});
  auto st = FlattenLayers({bad}, dir_ + "/o.tar");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), Code::kInvalid);
}

TEST_F(FlattenTest, NotATarIsAClearError) {
  std::string junk = dir_ + "/junk";
  FILE* f = fopen(junk.c_str(), "w");
  fputs("this is not a tar archive at all, not even close", f);
  fclose(f);
  auto st = FlattenLayers({junk}, dir_ + "/o.tar");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().ToString().find(junk), std::string::npos);
}

TEST(ImageReference, DefaultsLikeDocker) {
  auto r = ParseImageReference("debian");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "registry-1.docker.io");
  EXPECT_EQ(r->repository, "library/debian");
  EXPECT_EQ(r->tag, "latest");

  r = ParseImageReference("127.0.0.1:5000/team/py:3.11");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "127.0.0.1:5000");
  EXPECT_EQ(r->repository, "team/py");
  EXPECT_EQ(r->tag, "3.11");

  r = ParseImageReference("localhost/x@sha256:" + std::string(64, 'a'));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "localhost");
  EXPECT_EQ(r->tag, "");
  EXPECT_EQ(r->digest, "sha256:" + std::string(64, 'a'));
}

TEST(ImageReference, RejectsMalformed) {
  for (const char* bad : {"Upper/Case:1", "x@sha256:zz", "host:5000/", "a/b:t@g"})
    EXPECT_FALSE(ParseImageReference(bad).ok()) << bad;
}

}  // namespace
}  // namespace warren::image
