#include "etcd_process.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cluster/etcd_client.h"

namespace warren::testing {

namespace {
// A port the kernel just handed out on 127.0.0.1 (free now; etcd binds it a moment later).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}
}  // namespace

EtcdProcess::EtcdProcess(int members) {
  char tmpl[] = "/tmp/warren-etcd-XXXXXX";
  root_ = mkdtemp(tmpl);
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.dir = root_ + "/" + m.name;
    m.client_url = "http://127.0.0.1:" + std::to_string(FreePort());
    m.peer_url = "http://127.0.0.1:" + std::to_string(FreePort());
    if (!initial_cluster_.empty()) initial_cluster_ += ",";
    initial_cluster_ += m.name + "=" + m.peer_url;
    members_.push_back(m);
  }
  for (int i = 0; i < members; ++i) Start(i);
  WaitReady();
}

EtcdProcess::~EtcdProcess() {
  for (size_t i = 0; i < members_.size(); ++i) Stop(static_cast<int>(i));
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

std::string EtcdProcess::endpoints() const {
  std::string out;
  for (const Member& m : members_) out += (out.empty() ? "" : ",") + m.client_url;
  return out;
}

void EtcdProcess::Start(int member) {
  Member& m = members_[member];
  if (m.pid > 0) return;
  std::vector<std::string> args = {
      "etcd", "--name", m.name, "--data-dir", m.dir, "--listen-client-urls", m.client_url,
      "--advertise-client-urls", m.client_url, "--listen-peer-urls", m.peer_url,
      "--initial-advertise-peer-urls", m.peer_url, "--initial-cluster", initial_cluster_,
      "--initial-cluster-state", "new", "--initial-cluster-token", root_,
      // Faster elections than the defaults (100 ms / 1 s), for the failure tests.
      "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "error", "--logger",
      "zap", "--log-outputs", m.dir + ".log"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // fork + exec rather than posix_spawn: the child asks to be killed with the test binary,
  // so a crashed test leaves no etcd behind.
  const pid_t parent = getpid();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execvp("etcd", argv.data());
    _exit(127);
  }
  m.pid = pid;
}

void EtcdProcess::Stop(int member) {
  Member& m = members_[member];
  if (m.pid <= 0) return;
  kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -1;
}

void EtcdProcess::WaitReady() const {
  auto opts = cluster::ParseEtcdEndpoints(endpoints());
  ASSERT_TRUE(opts.ok());
  cluster::EtcdClient client(*opts);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = client.Put("/warren-test/ready", "1");
    if (r.ok()) return;
    last = r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "etcd did not become ready: " << last.ToString();
}

namespace {
EtcdProcess*& Shared() {
  static EtcdProcess* etcd = nullptr;
  return etcd;
}
class SharedEtcdEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    delete Shared();
    Shared() = nullptr;
  }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SharedEtcdEnvironment);
}  // namespace

EtcdProcess* SharedEtcd() {
  static std::mutex mu;  // tests call this from several threads
  std::lock_guard lock(mu);
  if (!Shared()) Shared() = new EtcdProcess(1);
  return Shared();
}

std::unique_ptr<cluster::EtcdClient> ClientOf(const std::string& endpoints, int timeout_ms) {
  auto o = cluster::ParseEtcdEndpoints(endpoints);
  EXPECT_TRUE(o.ok());
  o->request_timeout_ms = timeout_ms;
  o->retry_budget_ms = timeout_ms * 12 / 5;  // the defaults' ratio
  return std::make_unique<cluster::EtcdClient>(*o);
}

}  // namespace warren::testing
