// SimulatedNode (`warren node --simulate`) behind the real NodeService and reached by the real
// RemoteNode, as API servers reach it in bench/cluster.py: creates are held and counted, their
// layers reported, deletes and duplicates answered as a real node answers them, and what a
// simulation cannot do (commands, files) refused with a clear error, never made-up output.
#include "cluster/simulated_node.h"

#include <gtest/gtest.h>

#include "cluster/node_service.h"
#include "cluster/remote_node.h"
#include "server/http_server.h"

namespace warren::cluster {
namespace {

constexpr char kSecret[] = "cluster-secret-for-tests";

node::NodeSandboxSpec Spec(const std::string& id,
                           runtime::BackendKind backend = runtime::BackendKind::kContainer) {
  node::NodeSandboxSpec s;
  s.backend = backend;
  s.config.id = id;
  runtime::LayerRef layer;
  layer.digest = "sha256:" + std::string(64, 'b');
  s.config.layers = {layer};
  return s;
}

class SimulatedNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<NodeService>(&sim_, kSecret);
    server::ServerOptions opts;
    opts.listen = "127.0.0.1:0";
    opts.io_threads = 1;
    opts.blocking_threads = 2;
    http_ = std::make_unique<server::HttpServer>(service_.get(), opts);
    ASSERT_TRUE(http_->Start().ok());
    remote_ = std::make_unique<RemoteNode>(
        "sim-000", "http://127.0.0.1:" + std::to_string(http_->port()), kSecret);
  }
  void TearDown() override {
    remote_.reset();
    http_->Stop();
  }

  SimulatedNode sim_{"sim-000", {runtime::BackendKind::kContainer}};
  std::unique_ptr<NodeService> service_;
  std::unique_ptr<server::HttpServer> http_;
  std::unique_ptr<RemoteNode> remote_;
};

TEST_F(SimulatedNodeTest, HoldsWhatItIsGivenAndReportsItsLayers) {
  ASSERT_TRUE(remote_->CreateSandbox(Spec("sb-1")).ok());
  ASSERT_TRUE(remote_->CreateSandbox(Spec("sb-2")).ok());
  EXPECT_EQ(sim_.size(), 2u);
  EXPECT_EQ(sim_.Layers(), std::vector<std::string>{"sha256:" + std::string(64, 'b')});
  auto info = remote_->Info();
  EXPECT_EQ(info.value("sandboxes", 0), 2);
  EXPECT_TRUE(info.value("simulated", false));

  auto again = remote_->CreateSandbox(Spec("sb-1"));
  EXPECT_EQ(again.status().code(), Code::kConflict);
  EXPECT_TRUE(remote_->DeleteSandbox("sb-1").ok());
  EXPECT_EQ(remote_->DeleteSandbox("sb-1").code(), Code::kNotFound);
  EXPECT_EQ(sim_.SandboxIds(), std::vector<std::string>{"sb-2"});
}

TEST_F(SimulatedNodeTest, RefusesABackendItDoesNotOffer) {
  auto r = remote_->CreateSandbox(Spec("sb-vm", runtime::BackendKind::kMicrovm));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalid);
  EXPECT_NE(r.status().message().find("microvm"), std::string::npos);
  EXPECT_EQ(sim_.size(), 0u);
}

TEST_F(SimulatedNodeTest, RefusesCommandsAndFilesWithAClearError) {
  ASSERT_TRUE(remote_->CreateSandbox(Spec("sb-1")).ok());
  node::ExecSpec spec;
  spec.argv = {"true"};
  auto exec = remote_->StartExec("sb-1", "ex-1", spec);
  ASSERT_FALSE(exec.ok());
  EXPECT_EQ(exec.status().code(), Code::kInvalid);
  EXPECT_NE(exec.status().message().find("simulated"), std::string::npos);
  EXPECT_EQ(remote_->WriteFile("sb-1", "/tmp/x", 0644, "x").code(), Code::kInvalid);
  EXPECT_EQ(remote_->ReadFile("sb-1", "/tmp/x", 10).status().code(), Code::kInvalid);
  // An unknown sandbox is not found, as on a real node.
  EXPECT_EQ(remote_->StartExec("nope", "ex-2", spec).status().code(), Code::kNotFound);
  EXPECT_EQ(remote_->PauseSandbox("nope").code(), Code::kNotFound);
  EXPECT_TRUE(remote_->PauseSandbox("sb-1").ok());
  EXPECT_TRUE(remote_->ResumeSandbox("sb-1").ok());
  auto changes = remote_->Changes("sb-1", "/", 10);
  ASSERT_TRUE(changes.ok());
  EXPECT_TRUE(changes->changes.empty());
}

}  // namespace
}  // namespace warren::cluster
