// A cluster node's layers from the shared store (image/blob_source.h, LayerStore::Ensure): a
// published blob is fetched once, verified, and kept; a wrong or missing one is refused and
// leaves nothing behind. The HTTP store is served by a tiny server on loopback.
#include "image/blob_source.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/sha256.h"
#include "image/layer_store.h"

namespace warren::image {
namespace {

namespace fs = std::filesystem;

// Bytes that pass for an EROFS image: the superblock magic at offset 1024.
std::string FakeErofs(const std::string& tag) {
  std::string b(4096, '\0');
  const uint32_t magic = 0xE0F5E1E2;
  memcpy(&b[1024], &magic, sizeof magic);
  b.replace(2048, tag.size(), tag);
  return b;
}

std::string Write(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

class BlobSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("warren-blobs-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/shared");
    fs::create_directories(dir_ + "/node");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(BlobSourceTest, PublishedBlobIsFetchedVerifiedAndKept) {
  auto shared = OpenBlobSource(dir_ + "/shared");
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  const std::string data = FakeErofs("one");
  const std::string digest = "sha256:" + Sha256Hex(data);
  ASSERT_TRUE((*shared)->Publish(digest, Write(dir_ + "/blob", data)).ok());
  ASSERT_TRUE((*shared)->Publish(digest, dir_ + "/blob").ok());  // again: nothing to do

  LayerStore node(dir_ + "/node");
  ASSERT_TRUE(node.Init().ok());
  EXPECT_EQ(node.Ensure(digest).code(), Code::kNotFound);  // no source yet
  node.SetSource(shared->get());
  std::vector<std::thread> creates;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) creates.emplace_back([&] { ok += node.Ensure(digest).ok(); });
  for (auto& t : creates) t.join();
  EXPECT_EQ(ok.load(), 4);
  ASSERT_TRUE(node.Has(digest));
  std::ifstream in(node.BlobPath(digest), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), data);
  EXPECT_EQ(node.ListDigests(), std::vector<std::string>{digest});
}

// The node's copy is a bounded cache: past the bound, the least recently used blob goes
// (never one used within the minimum age), and comes back from the shared store when needed.
TEST_F(BlobSourceTest, TheNodesCacheStaysWithinItsBound) {
  auto shared = OpenBlobSource(dir_ + "/shared");
  ASSERT_TRUE(shared.ok());
  std::vector<std::string> digests;
  for (const char* tag : {"a", "b", "c"}) {
    const std::string data = FakeErofs(tag);
    digests.push_back("sha256:" + Sha256Hex(data));
    ASSERT_TRUE((*shared)->Publish(digests.back(), Write(dir_ + "/blob-" + tag, data)).ok());
  }
  LayerStore node(dir_ + "/node");
  ASSERT_TRUE(node.Init().ok());
  node.SetSource(shared->get());
  node.SetCacheLimit(2 * 4096, /*min_age_s=*/0);  // room for two
  ASSERT_TRUE(node.Ensure(digests[0]).ok());
  ASSERT_TRUE(node.Ensure(digests[1]).ok());
  ASSERT_TRUE(node.Ensure(digests[0]).ok());  // a used again: b is now the oldest
  ASSERT_TRUE(node.Ensure(digests[2]).ok());
  EXPECT_TRUE(node.Has(digests[0]));
  EXPECT_FALSE(node.Has(digests[1]));
  EXPECT_TRUE(node.Has(digests[2]));
  EXPECT_LE(node.CachedBytes(), 2u * 4096);
  ASSERT_TRUE(node.Ensure(digests[1]).ok());  // fetched again
  EXPECT_TRUE(node.Has(digests[1]));
  EXPECT_FALSE(node.Has(digests[0]));

  // Blobs used within the minimum age stay even past the bound (a create may be about to
  // mount them).
  node.SetCacheLimit(4096, /*min_age_s=*/600);
  ASSERT_TRUE(node.Ensure(digests[0]).ok());
  EXPECT_EQ(node.ListDigests().size(), 3u);
}

TEST_F(BlobSourceTest, CorruptOrMissingBlobsAreRefused) {
  auto shared = OpenBlobSource(dir_ + "/shared");
  ASSERT_TRUE(shared.ok());
  LayerStore node(dir_ + "/node");
  ASSERT_TRUE(node.Init().ok());
  node.SetSource(shared->get());
  const std::string missing = "sha256:" + std::string(64, 'b');
  EXPECT_EQ(node.Ensure(missing).code(), Code::kNotFound);
  EXPECT_EQ(node.Ensure("sha256:../../etc").code(), Code::kInvalid);

  // A blob replaced in the shared store (its bytes no longer match its name).
  const std::string data = FakeErofs("two");
  const std::string digest = "sha256:" + Sha256Hex(data);
  ASSERT_TRUE((*shared)->Publish(digest, Write(dir_ + "/blob", data)).ok());
  const std::string in_store = dir_ + "/shared/blobs/sha256/" + digest.substr(7);
  fs::permissions(in_store, fs::perms::owner_write, fs::perm_options::add);
  Write(in_store, FakeErofs("evil"));
  Status st = node.Ensure(digest);
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_NE(st.ToString().find("corrupt"), std::string::npos);
  EXPECT_TRUE(node.ListDigests().empty());

  // Not an EROFS image at all.
  const std::string text = "just text";
  const std::string text_digest = "sha256:" + Sha256Hex(text);
  ASSERT_TRUE((*shared)->Publish(text_digest, Write(dir_ + "/text", text)).ok());
  EXPECT_EQ(node.Ensure(text_digest).code(), Code::kInternal);
  EXPECT_TRUE(node.ListDigests().empty());
  // Nothing left in the node's scratch space either.
  size_t scratch = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + "/node"))
    scratch += e.is_regular_file();
  EXPECT_EQ(scratch, 0u);
}

TEST_F(BlobSourceTest, BadStoreSpecsAreRefused) {
  EXPECT_EQ(OpenBlobSource("relative/dir").status().code(), Code::kInvalid);
  EXPECT_EQ(OpenBlobSource(dir_ + "/nope").status().code(), Code::kNotFound);
  EXPECT_EQ(OpenBlobSource(Write(dir_ + "/file", "x")).status().code(), Code::kInvalid);
}

// GET /blobs/sha256:<hex> from a one-shot HTTP server: 200 with `body`, or 404.
class OneShotHttp {
 public:
  explicit OneShotHttp(std::map<std::string, std::string> blobs) : blobs_(std::move(blobs)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 8);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotHttp() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    for (;;) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      ssize_t n = read(c, buf, sizeof buf);
      std::string req(buf, n > 0 ? static_cast<size_t>(n) : 0);
      std::string path = req.substr(4, req.find(' ', 4) - 4);
      std::string reply;
      if (auto it = blobs_.find(path); it != blobs_.end())
        reply = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(it->second.size()) +
                "\r\nConnection: close\r\n\r\n" + it->second;
      else
        reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!write(c, reply.data(), reply.size());
      close(c);
    }
  }
  std::map<std::string, std::string> blobs_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST_F(BlobSourceTest, HttpStoreServesBlobsByDigest) {
  const std::string data = FakeErofs("http");
  const std::string digest = "sha256:" + Sha256Hex(data);
  OneShotHttp server(std::map<std::string, std::string>{{"/blobs/" + digest, data}});
  auto shared = OpenBlobSource(server.url() + "/");
  ASSERT_TRUE(shared.ok());
  LayerStore node(dir_ + "/node");
  ASSERT_TRUE(node.Init().ok());
  node.SetSource(shared->get());
  ASSERT_TRUE(node.Ensure(digest).ok());
  EXPECT_TRUE(node.Has(digest));
  EXPECT_EQ(node.Ensure("sha256:" + std::string(64, 'c')).code(), Code::kNotFound);
  // Read-only to Warren.
  EXPECT_EQ((*shared)->Publish(digest, node.BlobPath(digest)).code(), Code::kInvalid);
}

}  // namespace
}  // namespace warren::image
