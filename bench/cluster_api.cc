// The cluster's create path through real API servers: clients POST creates to every replica
// at once for a while, then one job's batch, then batches until the live count is reached.
// Driven by bench/cluster.py (which starts etcd, the simulated nodes and the API servers and
// reads etcd's and the API servers' metrics around each phase); prints one JSON object a phase.
//
//   bench_cluster_api --api URL[,URL...] --token T --image REF [--phase creates|batch|fill]
//                     [--etcd URL (fill)]
//                     [--seconds 5] [--clients 32] [--count 32000] [--live 380000]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "client/http_client.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using warren::client::HttpClient;

namespace {

struct Args {
  std::vector<std::string> apis;
  std::string token, image, phase = "creates";
  std::string etcd;  // where the fill counts the live sandboxes
  double seconds = 5;
  int clients = 32;  // creates in flight at each replica
  int64_t count = 32000;
  int64_t live = 380000;
  double cpu = 0.05;
  int memory_mb = 64;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Sandboxes that stay for the run (a day's TTL), as a long job's would.
json Spec(const Args& a) {
  return {{"image", a.image}, {"cpu", a.cpu},   {"memory_mb", a.memory_mb},
          {"disk_mb", 256},   {"ttl_s", 86400}, {"labels", {{"bench", "cluster"}}}};
}

// Sustained single creates: `clients` loops per replica, each one create at a time.
json Creates(const Args& a) {
  const std::string body = Spec(a).dump();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> lat;
  std::map<std::string, int64_t> errors;
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (const auto& url : a.apis)
    for (int c = 0; c < a.clients; ++c)
      threads.emplace_back([&, url] {
        HttpClient http(url, a.token);
        std::vector<double> mine;
        std::map<std::string, int64_t> errs;
        while (!stop.load()) {
          const auto s = Clock::now();
          auto r = http.Request("POST", "/v1/sandboxes", body);
          if (r.ok() && r->status == 201) {
            mine.push_back(Ms(Clock::now() - s));
          } else {
            errs[r.ok() ? std::to_string(r->status) : r.status().ToString()]++;
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        lat.insert(lat.end(), mine.begin(), mine.end());
        for (auto& [k, n] : errs) errors[k] += n;
      });
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double secs = Ms(Clock::now() - t0) / 1000;
  return {{"phase", "creates"},
          {"replicas", a.apis.size()},
          {"clients", a.clients * static_cast<int>(a.apis.size())},
          {"created", lat.size()},
          {"seconds", secs},
          {"creates_per_s", static_cast<double>(lat.size()) / secs},
          {"create_p50_ms", Pct(lat, 0.5)},
          {"create_p99_ms", Pct(lat, 0.99)},
          {"errors", errors}};
}

// One batch call of `count` to replica `url`: (made, errors by code, seconds).
json OneBatch(const Args& a, const std::string& url, int64_t count) {
  HttpClient http(url, a.token);
  const auto t0 = Clock::now();
  auto r =
      http.Request("POST", "/v1/sandboxes:batch", json{{"count", count}, {"spec", Spec(a)}}.dump());
  const double secs = Ms(Clock::now() - t0) / 1000;
  json out = {{"seconds", secs}, {"made", 0}, {"errors", json::object()}};
  if (!r.ok() || r->status != 200) {
    out["errors"][r.ok() ? std::to_string(r->status) + " " + r->body.substr(0, 300)
                         : r.status().ToString()] = count;
    return out;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) {
    out["errors"]["unparsable reply"] = count;
    return out;
  }
  out["made"] = j["sandboxes"].size();
  for (const auto& e : j["errors"]) {
    std::string code = e["error"].value("code", "?");
    out["errors"][code] = out["errors"].value(code, 0) + 1;
  }
  return out;
}

json Batch(const Args& a) {
  json b = OneBatch(a, a.apis.front(), a.count);
  return {{"phase", "batch"},
          {"count", a.count},
          {"made", b["made"]},
          {"seconds", b["seconds"]},
          {"errors", b["errors"]}};
}

// Batches (of up to `count`) from every replica at once until `live` sandboxes exist.
json Fill(const Args& a) {
  // Every replica's sandboxes: etcd's count of the records (base64 of the prefix and its end).
  HttpClient probe(a.etcd, "");
  auto live_now = [&]() -> int64_t {
    auto r =
        probe.Request("POST", "/v3/kv/range",
                      R"({"key":"L3dhcnJlbi9zYW5kYm94ZXMv","range_end":"L3dhcnJlbi9zYW5kYm94ZXMw",)"
                      R"("count_only":true})");
    if (!r.ok() || r->status != 200) return -1;
    auto j = json::parse(r->body, nullptr, false);
    return j.is_object() ? std::stoll(j.value("count", std::string("0"))) : -1;
  };
  const auto t0 = Clock::now();
  int64_t start = live_now(), made = 0;
  std::map<std::string, int64_t> errors;
  while (start + made < a.live) {
    std::vector<std::thread> threads;
    std::vector<json> results(a.apis.size());
    const int64_t left = a.live - start - made;
    const int64_t each =
        std::min<int64_t>(a.count, (left + static_cast<int64_t>(a.apis.size()) - 1) /
                                       static_cast<int64_t>(a.apis.size()));
    for (size_t i = 0; i < a.apis.size(); ++i)
      threads.emplace_back([&, i] { results[i] = OneBatch(a, a.apis[i], each); });
    for (auto& t : threads) t.join();
    int64_t round = 0;
    for (const auto& r : results) {
      round += r["made"].get<int64_t>();
      for (auto& [k, n] : r["errors"].items()) errors[k] += n.get<int64_t>();
    }
    made += round;
    if (round == 0) break;  // every create refused: full, or the cluster is failing
  }
  return {{"phase", "fill"},
          {"live", live_now()},
          {"made", made},
          {"seconds", Ms(Clock::now() - t0) / 1000},
          {"errors", errors}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--api") {
      std::stringstream in(v);
      for (std::string u; std::getline(in, u, ',');) a.apis.push_back(u);
    } else if (k == "--etcd") {
      a.etcd = v;
    } else if (k == "--token") {
      a.token = v;
    } else if (k == "--image") {
      a.image = v;
    } else if (k == "--phase") {
      a.phase = v;
    } else if (k == "--seconds") {
      a.seconds = std::stod(v);
    } else if (k == "--clients") {
      a.clients = std::stoi(v);
    } else if (k == "--count") {
      a.count = std::stoll(v);
    } else if (k == "--live") {
      a.live = std::stoll(v);
    } else {
      fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (a.apis.empty() || a.image.empty() || (a.phase == "fill" && a.etcd.empty())) {
    fprintf(stderr, "usage: bench_cluster_api --api URL[,URL...] --token T --image REF [...]\n");
    return 2;
  }
  json out = a.phase == "batch" ? Batch(a) : a.phase == "fill" ? Fill(a) : Creates(a);
  printf("%s\n", out.dump().c_str());
  return 0;
}
