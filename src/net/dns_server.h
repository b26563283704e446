// The node's DNS resolver for sandboxes, on the bridge address, port 53 (UDP). A sandbox's
// query (known by its source address, which it cannot forge: it has no capability over its
// network namespace) is answered only for names its policy allows; the addresses it gets
// are added to its firewall set for their TTL, so domain rules hold for every protocol.
// Everything else gets NXDOMAIN, so DNS cannot tunnel data out either.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::net {

class Network;
class Resolver;

class DnsServer {
 public:
  static Result<std::unique_ptr<DnsServer>> Start(uint32_t addr, uint16_t port, Network* net,
                                                  Resolver* resolver);
  ~DnsServer();
  nlohmann::json Stats() const;

 private:
  struct Query {
    sockaddr_in from;
    std::string msg;
  };
  DnsServer(Network* net, Resolver* resolver) : net_(net), resolver_(resolver) {}
  void Receive();
  void Work();
  std::string Answer(uint32_t src, const std::string& msg);

  Network* net_;
  Resolver* resolver_;
  UniqueFd sock_;
  UniqueFd wake_;  // eventfd: stop
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Query> queue_;
  bool stop_ = false;
  std::thread receiver_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> answered_{0}, refused_{0}, failed_{0};
};

}  // namespace warren::net
