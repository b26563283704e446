// ServiceChain: two HTTP services on one listener, so that a protocol served beside the
// contract's API (E2B's, server/e2b/e2b_service.h) needs no port of its own. The first
// service's routes come first and it authenticates bearer tokens, names upload paths and
// counts errors; routes of the second that need a token use the same tokens.
#pragma once

#include <memory>

#include "server/http_service.h"

namespace warren::server {

class ServiceChain : public HttpService {
 public:
  // Both outlive the chain. Their paths must not overlap (the first would win).
  ServiceChain(HttpService* first, HttpService* second);
  const RouteTable& routes() const override { return table_; }
  std::optional<Principal> Authenticate(std::string_view authorization) const override {
    return first_->Authenticate(authorization);
  }
  HttpReply Handle(int route, HttpRequest& req) override;
  Status Admit(int route, const Headers& headers) override;
  HttpReply Refusal(int route, const Status& refused) override;
  std::string UploadPath() const override { return first_->UploadPath(); }
  void CountError(Code code) override { first_->CountError(code); }

 private:
  HttpService* first_;
  HttpService* second_;
  int first_size_;
  RouteTable table_;
};

}  // namespace warren::server
