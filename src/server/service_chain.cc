#include "server/service_chain.h"

#include <vector>

namespace warren::server {
namespace {

std::vector<RouteSpec> Joined(const RouteTable& a, const RouteTable& b) {
  std::vector<RouteSpec> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a[static_cast<int>(i)]);
  for (size_t i = 0; i < b.size(); ++i) out.push_back(b[static_cast<int>(i)]);
  return out;
}

}  // namespace

ServiceChain::ServiceChain(HttpService* first, HttpService* second)
    : first_(first),
      second_(second),
      first_size_(static_cast<int>(first->routes().size())),
      table_(Joined(first->routes(), second->routes())) {}

HttpReply ServiceChain::Handle(int route, HttpRequest& req) {
  if (route < first_size_) return first_->Handle(route, req);
  return second_->Handle(route - first_size_, req);
}

Status ServiceChain::Admit(int route, const Headers& headers) {
  if (route < first_size_) return first_->Admit(route, headers);
  return second_->Admit(route - first_size_, headers);
}

HttpReply ServiceChain::Refusal(int route, const Status& refused) {
  if (route < first_size_) return first_->Refusal(route, refused);
  return second_->Refusal(route - first_size_, refused);
}

}  // namespace warren::server
