#include "server/route_table.h"

namespace warren::server {

const char* MethodName(Method m) {
  switch (m) {
    case Method::kGet:
      return "GET";
    case Method::kHead:
      return "HEAD";
    case Method::kPost:
      return "POST";
    case Method::kPut:
      return "PUT";
    case Method::kDelete:
      return "DELETE";
    case Method::kOther:
      return "OTHER";
  }
  return "OTHER";
}

RouteTable::RouteTable(std::vector<RouteSpec> routes) : routes_(std::move(routes)) {
  for (const auto& r : routes_) {
    Pattern p;
    std::string_view path = r.path;
    size_t i = 0;
    while (i < path.size()) {
      size_t j = path.find('/', i);
      if (j == std::string_view::npos) j = path.size();
      if (j > i) p.segs.emplace_back(path.substr(i, j - i));
      i = j + 1;
    }
    if (!p.segs.empty() && p.segs.back().size() > 3 &&
        p.segs.back().substr(p.segs.back().size() - 2) == "*}") {
      p.rest = true;
      p.segs.back() = p.segs.back().substr(0, p.segs.back().size() - 2) + "}";
    }
    patterns_.push_back(std::move(p));
  }
}

bool RouteTable::Matches(const Pattern& p, const std::vector<std::string>& segs,
                         PathParams* params) {
  if (p.rest ? segs.size() < p.segs.size() : segs.size() != p.segs.size()) return false;
  PathParams got;
  for (size_t i = 0; i < p.segs.size(); ++i) {
    const std::string& want = p.segs[i];
    const bool param = want.size() > 2 && want.front() == '{' && want.back() == '}';
    if (!param) {
      if (segs[i] != want) return false;
      continue;
    }
    std::string value = segs[i];
    if (p.rest && i + 1 == p.segs.size())
      for (size_t k = i + 1; k < segs.size(); ++k) value += "/" + segs[k];
    got[want.substr(1, want.size() - 2)] = std::move(value);
  }
  *params = std::move(got);
  return true;
}

RouteMatch RouteTable::Match(Method method, const std::vector<std::string>& segs) const {
  RouteMatch m;
  bool takes[static_cast<int>(Method::kOther) + 1] = {};
  for (size_t i = 0; i < routes_.size(); ++i) {
    PathParams params;
    if (!Matches(patterns_[i], segs, &params)) continue;
    m.public_path |= routes_[i].public_route;
    if (routes_[i].method == method) {
      m.index = static_cast<int>(i);
      m.params = std::move(params);
      return m;
    }
    takes[static_cast<int>(routes_[i].method)] = true;
  }
  // In one order whatever the table's: GET, HEAD, POST, PUT, DELETE.
  for (Method x : {Method::kGet, Method::kHead, Method::kPost, Method::kPut, Method::kDelete})
    if (takes[static_cast<int>(x)])
      m.allow += std::string(m.allow.empty() ? "" : ", ") + MethodName(x);
  return m;
}

}  // namespace warren::server
