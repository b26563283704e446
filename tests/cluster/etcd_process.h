// A real etcd (Debian's etcd-server) for tests: 1 or 3 members on free loopback ports, each
// in a scratch data dir, started and stopped by the test; the destructor kills every member
// it started (by pid) and removes the dirs.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "cluster/etcd_client.h"

namespace warren::testing {

class EtcdProcess {
 public:
  explicit EtcdProcess(int members = 1);
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "http://127.0.0.1:P1,http://127.0.0.1:P2,..."
  std::string endpoints() const;
  std::string endpoint(int member) const { return members_[member].client_url; }
  void Stop(int member);   // SIGKILL, as a crash
  void Start(int member);  // again, with its data
  // Waits until the cluster answers a write (a leader exists).
  void WaitReady() const;

 private:
  struct Member {
    std::string name, dir, client_url, peer_url;
    pid_t pid = -1;
  };
  std::vector<Member> members_;
  std::string root_, initial_cluster_;
};

// One single-member etcd for the whole binary (tests keep to keys of their own); stopped
// when the tests end.
EtcdProcess* SharedEtcd();
std::unique_ptr<cluster::EtcdClient> ClientOf(const std::string& endpoints, int timeout_ms = 5000);

}  // namespace warren::testing
