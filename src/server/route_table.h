// The API's routes as data: method, path pattern, the token scope it needs and how its body
// is read. http_server.cc pairs each with its handler; matching, scopes, body limits and the
// 405 answer (with the methods a path takes) all come from here, so they cannot disagree.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace warren::server {

enum class Method { kGet, kHead, kPost, kPut, kDelete, kOther };
const char* MethodName(Method m);

enum class BodyTo {
  kMemory,  // read into a string (up to body_limit)
  kFile,    // streamed to a temporary file (layer uploads)
  kStream,  // handed to the handler as it arrives (HttpRequest::body_stream)
};

struct RouteSpec {
  Method method;
  // "/v1/sandboxes/{id}/execs/{exec_id}": literal segments and {name} parameters; a last
  // "{name*}" takes every remaining segment, joined by '/' (layer refs with slashes).
  std::string_view path;
  // The token scope it needs: "" for any valid token. `public_route`: no token at all.
  std::string_view scope;
  uint64_t body_limit;
  BodyTo body_to = BodyTo::kMemory;
  bool public_route = false;
};

using PathParams = std::map<std::string, std::string>;

struct RouteMatch {
  int index = -1;  // the matching route, -1 if none
  PathParams params;
  // No route for this method, but the path has routes: the methods it takes, "GET, POST"
  // (405 with Allow). Empty when the path is unknown (404).
  std::string allow;
  bool public_path = false;  // a route of this path needs no token (so neither does its 405)
};

class RouteTable {
 public:
  explicit RouteTable(std::vector<RouteSpec> routes);
  RouteMatch Match(Method method, const std::vector<std::string>& segs) const;
  const RouteSpec& operator[](int i) const { return routes_[static_cast<size_t>(i)]; }
  size_t size() const { return routes_.size(); }

 private:
  struct Pattern {
    std::vector<std::string> segs;  // "{name}" or a literal
    bool rest = false;              // the last is "{name*}"
  };
  static bool Matches(const Pattern& p, const std::vector<std::string>& segs, PathParams* params);
  std::vector<RouteSpec> routes_;
  std::vector<Pattern> patterns_;
};

}  // namespace warren::server
