#include "cluster/cluster_calls.h"

#include <algorithm>
#include <thread>

#include "base/cleanup.h"

namespace warren::cluster {

using nlohmann::json;

namespace {

Status Bad(const std::string& what, const std::string& msg) { return Invalid(what + ": " + msg); }

// The runner image a call names ("" for the nodes' default), for affinity.
std::string ImageOf(const json& call) {
  if (!call.is_object()) return "";
  auto it = call.find("image");
  return it != call.end() && it->is_string() ? it->get<std::string>() : "";
}

// A stable per-(image, node) number: the same image ranks the same nodes first everywhere.
// FNV-1a: computed for every fncall node on every call, so cheap, not cryptographic.
uint64_t Affinity(const std::string& image, const std::string& node) {
  uint64_t h = 14695981039346656037ull;
  for (const std::string* part : {&image, &node}) {
    for (unsigned char c : *part) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // a separator no name byte can fake with the next
  }
  return h;
}

json ErrorEntry(const Status& st) {
  return {{"error", {{"code", CodeName(st.code())}, {"message", st.ToString()}}}};
}

}  // namespace

ClusterCalls::ClusterCalls(ListNodes nodes, Connect connect)
    : nodes_(std::move(nodes)), connect_(std::move(connect)) {}

std::vector<std::string> ClusterCalls::Candidates(const std::string& image) const {
  std::vector<std::pair<std::pair<int64_t, uint64_t>, std::string>> ranked;
  const std::vector<NodeView> views = nodes_();
  MutexLock lock(&mu_);
  for (const NodeView& n : views) {
    if (n.admin.cordoned || n.admin.draining) continue;
    if (!n.record.backends.count(runtime::BackendKind::kFncall)) continue;
    auto it = running_.find(n.record.name);
    const int64_t running = it == running_.end() ? 0 : it->second;
    // Smaller is better on both: fewer running, then the image's own order of nodes.
    ranked.push_back({{running, ~Affinity(image, n.record.name)}, n.record.name});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  out.reserve(ranked.size());
  for (auto& [key, name] : ranked) out.push_back(std::move(name));
  return out;
}

Result<json> ClusterCalls::Send(const json& request, bool batch, size_t weight,
                                const std::vector<std::string>& nodes) {
  const char* what = batch ? "call batch" : "call";
  if (stopped_) return Status(Code::kUnavailable, what, "fncall", "the API server is stopping");
  Status last = Status(Code::kUnavailable, what, "fncall",
                       "no ready node runs fncall (start nodes with --fncall-image)")
                    .WithRetryAfter(1);
  int tries = 0;
  for (const std::string& name : nodes) {
    if (tries++ == kTries) break;
    if (tries > 1) ++retried_;
    auto node = connect_(name);
    if (!node.ok()) {
      last = node.status();
      continue;
    }
    {
      MutexLock lock(&mu_);
      running_[name] += static_cast<int64_t>(weight);
    }
    Cleanup done([&] {
      MutexLock lock(&mu_);
      if ((running_[name] -= static_cast<int64_t>(weight)) <= 0) running_.erase(name);
    });
    ++sent_;
    auto r = (*node)->RunCall(request, batch);
    // Unavailable: the node is unreachable, stopping or runs no fncall; another may run it.
    // Anything else is the call's own answer.
    if (r.ok() || r.status().code() != Code::kUnavailable) return r;
    last = r.status();
  }
  return last;
}

Result<json> ClusterCalls::Call(const json& request) {
  if (!request.is_object()) return Bad("call", "the body must be a JSON object");
  return Send(request, /*batch=*/false, 1, Candidates(ImageOf(request)));
}

Result<json> ClusterCalls::CallBatch(const json& request) {
  // The shape is checked here, since the batch is cut before any node sees it; each call
  // is checked by the node that runs it.
  if (!request.is_object() || !request.contains("calls") || !request["calls"].is_array())
    return Bad("call batch", "the body must be {\"calls\": [CallRequest, ...]}");
  for (const auto& [k, v] : request.items())
    if (k != "calls") return Bad("call batch", "unknown field `" + k + "`");
  const json& calls = request["calls"];
  if (calls.size() > fncall::kMaxBatchCalls)
    return Bad("call batch",
               "at most " + std::to_string(fncall::kMaxBatchCalls) + " calls per batch");
  if (calls.empty()) return json{{"results", json::array()}};
  // One ranking for the whole batch: share s starts at its s-th node, so the shares sent at
  // once land on different nodes, and each falls back along the same order.
  const std::vector<std::string> ranked = Candidates(ImageOf(calls[0]));
  const size_t shares =
      std::min(std::max<size_t>(1, ranked.size()), (calls.size() + kMinShare - 1) / kMinShare);
  std::vector<json> results(calls.size());
  std::vector<std::thread> senders;
  const size_t per = calls.size() / shares, extra = calls.size() % shares;
  size_t begin = 0;
  for (size_t s = 0; s < shares; ++s) {
    const size_t end = begin + per + (s < extra ? 1 : 0);
    senders.emplace_back([&, s, begin, end] {
      json share = {{"calls", json::array()}};
      for (size_t i = begin; i < end; ++i) share["calls"].push_back(calls[i]);
      std::vector<std::string> order = ranked;
      if (!order.empty())
        std::rotate(order.begin(), order.begin() + static_cast<long>(s % order.size()),
                    order.end());
      auto r = Send(share, /*batch=*/true, end - begin, order);
      const json* got =
          r.ok() && r->is_object() && r->contains("results") ? &(*r)["results"] : nullptr;
      const bool whole = got && got->is_array() && got->size() == end - begin;
      const Status why =
          r.ok() ? Internal("call batch", "fncall", "a node answered a short batch") : r.status();
      for (size_t i = begin; i < end; ++i) results[i] = whole ? (*got)[i - begin] : ErrorEntry(why);
    });
    begin = end;
  }
  for (auto& t : senders) t.join();
  return json{{"results", std::move(results)}};
}

json ClusterCalls::Stats() const {
  json running = json::object();
  {
    MutexLock lock(&mu_);
    for (const auto& [node, n] : running_) running[node] = n;
  }
  return {{"sent", sent_.load()}, {"retried", retried_.load()}, {"running", running}};
}

void ClusterCalls::Shutdown() { stopped_ = true; }

}  // namespace warren::cluster
