// Root integration test: file-backed EROFS via the new mount API, idmapped clones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "image/erofs_mount_cache.h"
#include "image/layer_store.h"
#include "sys/backing_dev.h"
#include "test_env.h"
#include "test_files.h"

namespace warren {
namespace {

// A store in a scratch dir holding one busybox layer.
class ErofsMount : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u);
    dir = testing::MakeScratchDir("erofs");
    store = std::make_unique<image::LayerStore>(dir + "/store");
    ASSERT_TRUE(store->Init().ok());
    testing::MakeBusyboxRoot(dir + "/root");
    testing::TarDir(dir + "/root", dir + "/root.tar");
    auto info = store->ImportTar(dir + "/root.tar");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    blob = *info;
  }
  void TearDown() override { testing::RemoveDir(dir); }

  std::string dir;
  std::unique_ptr<image::LayerStore> store;
  image::BlobInfo blob;
};

TEST_F(ErofsMount, OneMountPerLayerSharedAndReleasedWhenIdle) {
  EXPECT_TRUE(image::LayerStore::IsErofs(store->BlobPath(blob.digest)));

  image::ErofsMountCache cache;
  {
    auto a = cache.Acquire(blob.digest, store->BlobPath(blob.digest));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = cache.Acquire(blob.digest, store->BlobPath(blob.digest));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->get(), b->get());  // mounted once
    EXPECT_EQ(cache.live(), 1u);
    // The mount is detached: nothing appears in the host's mount table.
    EXPECT_EQ(testing::CountMountinfo(store->BlobPath(blob.digest)), 0);
  }
  EXPECT_EQ(cache.live(), 0u);
}

// A layer read on demand is mounted with a smaller readahead: set on its own bdi, which goes
// with the mount.
TEST_F(ErofsMount, AReadaheadIsSetOnItsOwnMountAndGoesWithIt) {
  image::ErofsMountCache cache;
  auto before = sys::ListBdis("erofs-");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  std::string bdi;
  {
    auto a = cache.Acquire(blob.digest, store->BlobPath(blob.digest), "", 24);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto after = sys::ListBdis("erofs-");
    ASSERT_TRUE(after.ok());
    bdi = sys::NewBdi(*before, *after);
    ASSERT_FALSE(bdi.empty()) << "no new erofs bdi (or several)";
    EXPECT_EQ(warren::testing::ReadWholeFile("/sys/class/bdi/" + bdi + "/read_ahead_kb"), "24\n");
  }
  auto gone = sys::ListBdis("erofs-");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->count(bdi), 0u) << bdi << " outlived its mount";
  EXPECT_TRUE(sys::SetBdiReadaheadKb("../x", 1).code() == Code::kInvalid);
}

}  // namespace
}  // namespace warren
