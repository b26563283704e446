// Root integration test: a snapshot's tree becomes a stored layer through a private tmpfs, or
// the store's disk when it outgrows RAM, with the same digest either way; whatever happens,
// no scratch mount or directory is left.
#include "node/snapshot_builder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/unique_fd.h"
#include "test_env.h"

namespace warren {
namespace {

bool ScratchMountsUnder(const std::string& dir) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.find(dir) != std::string::npos) return true;
  return false;
}

class SnapshotBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u);
    dir_ = testing::MakeScratchDir("snapshot-builder");
    store_ = std::make_unique<image::LayerStore>(dir_ + "/store");
    ASSERT_TRUE(store_->Init().ok());
    src_ = dir_ + "/src";
    std::filesystem::create_directories(src_ + "/etc");
    std::ofstream(src_ + "/etc/big") << std::string(300 << 10, 'x');
    std::ofstream(src_ + "/etc/small") << "s";
    ASSERT_EQ(chown((src_ + "/etc/small").c_str(), 1000, 1000), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Copies src_ into the scratch tree, as a backend does from a sandbox.
  node::WriteTreeFn Writer() {
    return [this](int dst, const std::string&, const isolation::LayerTreeOptions& opts,
                  isolation::LayerTreeStats* stats) {
      UniqueFd src(open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      return isolation::ApplyLayerTree(src.get(), dst, opts, stats);
    };
  }

  std::string dir_, src_;
  std::unique_ptr<image::LayerStore> store_;
};

TEST_F(SnapshotBuilderTest, ATreeTooBigForRamIsBuiltOnDiskToTheSameLayer) {
  auto in_ram = node::BuildSnapshotLayer(store_.get(), "sb-a", {}, {}, Writer());
  ASSERT_TRUE(in_ram.ok()) << in_ram.status().ToString();
  EXPECT_EQ(in_ram->file_bytes, (300u << 10) + 1);
  EXPECT_TRUE(store_->Has(in_ram->digest));
  // 64 KiB of RAM: the 300 KiB file does not fit (ENOSPC), so the tree is made again on disk.
  auto on_disk = node::BuildSnapshotLayer(store_.get(), "sb-a", {}, {}, Writer(), 64 << 10);
  ASSERT_TRUE(on_disk.ok()) << on_disk.status().ToString();
  EXPECT_EQ(on_disk->digest, in_ram->digest);
  EXPECT_EQ(on_disk->file_bytes, in_ram->file_bytes);
  EXPECT_FALSE(ScratchMountsUnder(dir_));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/tmp"));
}

TEST_F(SnapshotBuilderTest, AFailedSnapshotLeavesNothing) {
  node::SnapshotSpec spec;
  spec.max_bytes = 100 << 10;  // the big file passes it
  auto over = node::BuildSnapshotLayer(store_.get(), "sb-b", spec, {}, Writer());
  ASSERT_EQ(over.status().code(), Code::kQuota) << over.status().ToString();
  EXPECT_NE(over.status().ToString().find("/etc/big"), std::string::npos);
  EXPECT_EQ(over.status().ToString().find(dir_), std::string::npos) << "a host path";
  auto refused = node::BuildSnapshotLayer(
      store_.get(), "sb-b", {}, {},
      [](int, const std::string&, const isolation::LayerTreeOptions&, isolation::LayerTreeStats*) {
        return Status(Code::kConflict, "snapshot", "sandbox", "its init is gone");
      });
  EXPECT_EQ(refused.status().code(), Code::kConflict);
  EXPECT_FALSE(ScratchMountsUnder(dir_));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/tmp"));
  EXPECT_TRUE(store_->ListDigests().empty());
  // A skipped path is not in the layer: another digest than the whole tree's.
  auto whole = node::BuildSnapshotLayer(store_.get(), "sb-b", {}, {}, Writer());
  auto skipped = node::BuildSnapshotLayer(store_.get(), "sb-b", {}, {"/etc/small"}, Writer());
  ASSERT_TRUE(whole.ok() && skipped.ok());
  EXPECT_NE(whole->digest, skipped->digest);
  EXPECT_EQ(skipped->entries, whole->entries - 1);
}

}  // namespace
}  // namespace warren
