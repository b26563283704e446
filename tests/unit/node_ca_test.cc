// The node CA of the egress proxy's HTTPS cache: leaves verify for the hosts it may vouch for
// and, by its name constraints, for no other; it survives a restart and keeps its key when
// the host list changes.
#include "net/node_ca.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

namespace warren::net {
namespace {

class NodeCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/warren-node-ca-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // OpenSSL's verdict on `leaf` for `host`, with only `ca` trusted.
  static int Verify(X509* ca, X509* leaf, const std::string& host) {
    X509_STORE* store = X509_STORE_new();
    X509_STORE_add_cert(store, ca);
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, leaf, nullptr);
    X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(ctx), host.c_str(), 0);
    X509_VERIFY_PARAM_set_purpose(X509_STORE_CTX_get0_param(ctx), X509_PURPOSE_SSL_SERVER);
    int ok = X509_verify_cert(ctx);
    int err = X509_STORE_CTX_get_error(ctx);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return ok == 1 ? X509_V_OK : err;
  }

  std::string dir_;
};

TEST_F(NodeCaTest, LeavesVerifyOnlyForTheListedHosts) {
  InterceptList list({"PyPI.org.", "*.npm.test"});
  EXPECT_TRUE(list.Matches("pypi.org"));
  EXPECT_TRUE(list.Matches("a.npm.test"));
  EXPECT_FALSE(list.Matches("npm.test"));
  EXPECT_FALSE(list.Matches("xpypi.org"));
  EXPECT_FALSE(list.Matches("evilnpm.test"));
  auto ca = NodeCa::Open(dir_ + "/ca", list);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  for (const char* host : {"pypi.org", "a.npm.test"}) {
    auto leaf = (*ca)->Leaf(host);
    ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
    EXPECT_EQ(Verify((*ca)->cert(), leaf->first.get(), host), X509_V_OK) << host;
    EXPECT_EQ(X509_check_private_key(leaf->first.get(), leaf->second), 1);
    // Its certificate names only that host.
    EXPECT_NE(Verify((*ca)->cert(), leaf->first.get(), "other.org"), X509_V_OK);
  }
  // The proxy never asks for these, and if its key were stolen, no sandbox would accept them.
  for (const char* host : {"evil.com", "npm.test", "pypi.org.evil.com"}) {
    auto leaf = (*ca)->Leaf(host);
    ASSERT_TRUE(leaf.ok());
    EXPECT_EQ(Verify((*ca)->cert(), leaf->first.get(), host), X509_V_ERR_PERMITTED_VIOLATION)
        << host;
  }
}

TEST_F(NodeCaTest, RefusesWhatIsNotAHostName) {
  auto ca = NodeCa::Open(dir_ + "/ca", InterceptList({"*.npm.test"}));
  ASSERT_TRUE(ca.ok());
  for (const char* bad : {"", "a,DNS:evil.com,.npm.test", "a b.npm.test", "a\n.npm.test"}) {
    auto leaf = (*ca)->Leaf(bad);
    ASSERT_FALSE(leaf.ok()) << bad;
    EXPECT_EQ(leaf.status().code(), Code::kInvalid);
  }
}

TEST_F(NodeCaTest, SurvivesARestartAndKeepsItsKeyWhenTheListChanges) {
  std::string first, second, third;
  {
    auto ca = NodeCa::Open(dir_ + "/ca", InterceptList({"pypi.org"}));
    ASSERT_TRUE(ca.ok());
    first = (*ca)->cert_pem();
  }
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/ca/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    auto ca = NodeCa::Open(dir_ + "/ca", InterceptList({"pypi.org"}));
    ASSERT_TRUE(ca.ok());
    second = (*ca)->cert_pem();
  }
  EXPECT_EQ(first, second);
  auto ca = NodeCa::Open(dir_ + "/ca", InterceptList({"pypi.org", "registry.npmjs.org"}));
  ASSERT_TRUE(ca.ok());
  third = (*ca)->cert_pem();
  EXPECT_NE(first, third);
  // A sandbox still holding the first certificate checks new leaves of its hosts with it.
  BIO* bio = BIO_new_mem_buf(first.data(), static_cast<int>(first.size()));
  X509Ptr old(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  ASSERT_TRUE(old);
  auto leaf = (*ca)->Leaf("pypi.org");
  ASSERT_TRUE(leaf.ok());
  EXPECT_EQ(Verify(old.get(), leaf->first.get(), "pypi.org"), X509_V_OK);
  EXPECT_EQ(
      Verify((*ca)->cert(), (*ca)->Leaf("registry.npmjs.org")->first.get(), "registry.npmjs.org"),
      X509_V_OK);
}

}  // namespace
}  // namespace warren::net
