// The floor of the cluster's create path against a real etcd: placement (Rank over the
// NodeDirectory's view of 160 simulated nodes) plus the reservation transaction that writes the
// sandbox record, next to a bare etcd put of the same record, in the same run. Driven by
// bench/cluster.py, which starts etcd and formats the figures; prints one JSON object a phase.
//
//   bench_cluster_store --etcd URLS [--nodes 160] [--seconds 5] [--clients 1,2,4] [--workers 32]
//                       [--batch 32000] [--live 380000]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/keys.h"
#include "cluster/membership.h"
#include "cluster/placement.h"
#include "cluster/reservation_batcher.h"
#include "cluster/reservations.h"

using namespace warren;
using namespace warren::cluster;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string etcd;
  int nodes = 160;
  double seconds = 5;
  std::vector<int> clients = {1, 2, 4};
  int64_t batch = 32000;
  int64_t live = 380000;
  int workers = 32;  // creates each replica serves at once
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// A record the size of a real one (946 bytes: three layers, two labels, a lease).
std::string RecordFor(const std::string& id, const std::string& node) {
  json j = {{"id", id},
            {"owner", "team-rl-7"},
            {"node", node},
            {"state", "creating"},
            {"created_at", "2026-12-02T11:04:34.123Z"},
            {"backend", "container"},
            {"image", "py:bookworm"},
            {"workspace", "task-17:1"},
            {"tools", {"grader:3"}},
            {"cpu", 0.5},
            {"memory_mb", 512},
            {"disk_mb", 1024},
            {"pids", 512},
            {"open_files", 4096},
            {"env", json::object()},
            {"labels", {{"job", "rl-run-42"}, {"rollout", "1234"}}},
            {"network", {{"mode", "none"}, {"allow", json::array()}}},
            {"filesystem", {{"read_only", json::array()}, {"writable", json::array()}}},
            {"ttl_s", 3600},
            {"idle_timeout_s", nullptr},
            {"trajectory", nullptr},
            {"on_divergence", "continue"},
            {"lease", "ls-0123456789abcdef"},
            {"on_lease_expiry", "delete"},
            {"error", nullptr}};
  json layers = json::array();
  for (const char* role : {"base", "tool", "workspace"})
    layers.push_back({{"ref", "py:bookworm"},
                      {"role", role},
                      {"digest",
                       "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123"
                       "456789abcdef"}});
  j["layers"] = layers;
  return j.dump();
}

std::unique_ptr<EtcdClient> Client(const std::string& urls) {
  auto o = ParseEtcdEndpoints(urls);
  if (!o.ok()) {
    fprintf(stderr, "%s\n", o.status().ToString().c_str());
    exit(2);
  }
  return std::make_unique<EtcdClient>(*o);
}

PlacementRequest Request() {
  PlacementRequest r;
  r.resources = {500, 512, 1024};
  r.layers = {"sha256:base"};
  return r;
}

// Phase: `clients` API server replicas (each its own etcd client, node view, reservation cache
// and group committer), each serving `workers` creates at once, for `seconds`.
json Creates(const Args& a, int clients, std::atomic<int64_t>* next_id) {
  std::vector<double> place_ms, reserve_ms, total_ms;
  std::mutex mu;
  std::atomic<uint64_t> writes{0}, bytes{0}, conflicts{0}, full{0}, groups{0};
  std::atomic<int64_t> done{0};
  const PlacementPolicy policy{.cpu_overcommit = 4.0, .memory_overcommit = 2.0};
  const PlacementRequest req = Request();
  struct Replica {
    std::unique_ptr<EtcdClient> kv;
    std::unique_ptr<NodeDirectory> dir;
    std::unique_ptr<Reservations> res;
    std::unique_ptr<ReservationBatcher> batcher;
  };
  std::vector<Replica> replicas(clients);
  for (auto& r : replicas) {
    r.kv = Client(a.etcd);
    r.dir = std::make_unique<NodeDirectory>(r.kv.get());
    if (!r.dir->Start().ok()) return {{"phase", "creates"}, {"error", "directory"}};
    NodeDirectory* dir = r.dir.get();
    r.res = std::make_unique<Reservations>(
        r.kv.get(), [dir](const std::string& node) { return dir->AllocationOf(node); });
    r.batcher = std::make_unique<ReservationBatcher>(r.res.get());
  }
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::milliseconds(static_cast<int64_t>(a.seconds * 1000));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    for (int w = 0; w < a.workers; ++w) {
      threads.emplace_back([&, c, w] {
        Replica& rep = replicas[c];
        std::vector<double> p, r, t;
        std::mt19937_64 rng(c * 1000 + w);
        while (Clock::now() < until) {
          const auto s0 = Clock::now();
          auto ranked = Rank(rep.dir->Ready(), req, policy, rng());
          const auto s1 = Clock::now();
          if (!ranked.ok()) {
            ++full;
            continue;
          }
          const std::string id = "sb-" + std::to_string(next_id->fetch_add(1));
          bool ok = false;
          for (const auto& node : *ranked) {
            auto view = rep.dir->Get(node);
            if (!view) continue;
            Status st = rep.batcher->Reserve(node, req.resources, LimitOf(view->record, policy),
                                             {TxnOp::Put(keys::Sandbox(id), RecordFor(id, node))});
            if (st.ok()) {
              ok = true;
              break;
            }
            if (st.code() != Code::kQuota) break;
          }
          const auto s2 = Clock::now();
          if (!ok) continue;
          p.push_back(Ms(s1 - s0));
          r.push_back(Ms(s2 - s1));
          t.push_back(Ms(s2 - s0));
          ++done;
        }
        std::lock_guard l(mu);
        place_ms.insert(place_ms.end(), p.begin(), p.end());
        reserve_ms.insert(reserve_ms.end(), r.begin(), r.end());
        total_ms.insert(total_ms.end(), t.begin(), t.end());
      });
    }
  }
  for (auto& t : threads) t.join();
  const double secs = Ms(Clock::now() - t0) / 1000;
  for (auto& r : replicas) {
    auto cnt = r.kv->counters();
    writes += cnt.writes;
    bytes += cnt.request_bytes;
    conflicts += r.res->conflicts();
    groups += r.batcher->groups();
  }
  const double n = static_cast<double>(std::max<int64_t>(done.load(), 1));
  return {{"phase", "creates"},
          {"clients", clients},
          {"workers", a.workers},
          {"creates", done.load()},
          {"creates_per_s", static_cast<double>(done.load()) / secs},
          {"place_p50_ms", Pct(place_ms, 0.5)},
          {"place_p99_ms", Pct(place_ms, 0.99)},
          {"reserve_p50_ms", Pct(reserve_ms, 0.5)},
          {"reserve_p99_ms", Pct(reserve_ms, 0.99)},
          {"create_p50_ms", Pct(total_ms, 0.5)},
          {"create_p99_ms", Pct(total_ms, 0.99)},
          {"etcd_writes_per_create", static_cast<double>(writes.load()) / n},
          {"etcd_request_bytes_per_create", static_cast<double>(bytes.load()) / n},
          {"sandboxes_per_txn", n / static_cast<double>(std::max<uint64_t>(groups.load(), 1))},
          {"conflicts", conflicts.load()},
          {"full", full.load()}};
}

// Baseline: as many concurrent clients as the creates phase has workers in all, each putting
// one record per "create", nothing else.
json BarePuts(const Args& a, int clients, std::atomic<int64_t>* next_id) {
  std::vector<double> all;
  std::mutex mu;
  std::atomic<int64_t> done{0};
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::milliseconds(static_cast<int64_t>(a.seconds * 1000));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients * a.workers; ++c) {
    threads.emplace_back([&] {
      auto kv = Client(a.etcd);
      std::vector<double> mine;
      while (Clock::now() < until) {
        const std::string id = "sb-" + std::to_string(next_id->fetch_add(1));
        const auto s0 = Clock::now();
        if (kv->Put(keys::Sandbox(id), RecordFor(id, "n0")).ok()) {
          mine.push_back(Ms(Clock::now() - s0));
          ++done;
        }
      }
      std::lock_guard l(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  const double secs = Ms(Clock::now() - t0) / 1000;
  return {{"phase", "bare_puts"},        {"clients", clients},
          {"puts", done.load()},         {"puts_per_s", static_cast<double>(done.load()) / secs},
          {"put_p50_ms", Pct(all, 0.5)}, {"put_p99_ms", Pct(all, 0.99)}};
}

// One job's batch: planned in one pass, then reserved node by node, the records written in the
// reservations' transactions (etcd takes 128 operations a transaction: chunks of 120).
json Batch(const Args& a, std::atomic<int64_t>* next_id) {
  auto kv = Client(a.etcd);
  NodeDirectory dir(kv.get());
  if (!dir.Start().ok()) return {{"phase", "batch"}, {"error", "directory"}};
  Reservations res(kv.get());
  const PlacementPolicy policy{.cpu_overcommit = 4.0, .memory_overcommit = 2.0};
  const auto t0 = Clock::now();
  auto plan = PlanBatch(dir.Ready(), Request(), a.batch, policy, 1);
  const auto t1 = Clock::now();
  std::atomic<int64_t> placed{0};
  std::vector<std::pair<std::string, int64_t>> work(plan.begin(), plan.end());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < work.size();) {
        const auto& [node, count] = work[i];
        const Resources limit = LimitOf(dir.Get(node)->record, policy);
        for (int64_t left = count; left > 0;) {
          const int64_t chunk = std::min<int64_t>(left, 120);
          auto n = res.Reserve(node, Request().resources, chunk, limit, true, [&](int64_t k) {
            std::vector<TxnOp> ops;
            for (int64_t j = 0; j < k; ++j) {
              const std::string id = "sb-" + std::to_string(next_id->fetch_add(1));
              ops.push_back(TxnOp::Put(keys::Sandbox(id), RecordFor(id, node)));
            }
            return ops;
          });
          if (!n.ok() || *n == 0) break;
          placed += *n;
          left -= *n;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto t2 = Clock::now();
  return {{"phase", "batch"},       {"sandboxes", a.batch},    {"placed", placed.load()},
          {"plan_ms", Ms(t1 - t0)}, {"total_ms", Ms(t2 - t0)}, {"nodes_used", plan.size()}};
}

// Fills etcd up to `live` sandbox records (batched puts), for the database size.
json Fill(const Args& a, std::atomic<int64_t>* next_id) {
  auto kv0 = Client(a.etcd);
  auto have = kv0->Range(
      {.key = keys::kSandboxes, .range_end = PrefixEnd(keys::kSandboxes), .count_only = true});
  const int64_t start = have.ok() ? have->count : 0;
  std::atomic<int64_t> left{a.live - start};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w) {
    threads.emplace_back([&] {
      auto kv = Client(a.etcd);
      for (;;) {
        const int64_t k = std::min<int64_t>(120, left.fetch_sub(120));
        if (k <= 0) return;
        Txn t;
        for (int64_t j = 0; j < k; ++j) {
          const std::string id = "sb-" + std::to_string(next_id->fetch_add(1));
          t.success.push_back(TxnOp::Put(keys::Sandbox(id), RecordFor(id, "n0")));
        }
        if (!kv->Commit(t).ok()) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  auto after = kv0->Range(
      {.key = keys::kSandboxes, .range_end = PrefixEnd(keys::kSandboxes), .count_only = true});
  return {{"phase", "fill"},
          {"live_records", after.ok() ? after->count : -1},
          {"fill_s", Ms(Clock::now() - t0) / 1000}};
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--etcd")
      a.etcd = v;
    else if (k == "--nodes")
      a.nodes = std::stoi(v);
    else if (k == "--seconds")
      a.seconds = std::stod(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--live")
      a.live = std::stoll(v);
    else if (k == "--clients") {
      a.clients.clear();
      std::stringstream in(v);
      for (std::string c; std::getline(in, c, ',');) a.clients.push_back(std::stoi(c));
    }
  }
  if (a.etcd.empty()) {
    fprintf(stderr, "usage: bench_cluster_store --etcd URLS [...]\n");
    return 2;
  }
  // The simulated nodes: the unit's shape (192 cores, 1.5 TiB), each heartbeating.
  auto kv = Client(a.etcd);
  std::vector<std::unique_ptr<NodeHeartbeat>> nodes;
  for (int i = 0; i < a.nodes; ++i) {
    NodeRecord r;
    r.name = "n" + std::to_string(i);
    r.address = "http://127.0.0.1:1";
    r.capacity = {192000, 1536 * 1024, 4 << 20};
    r.backends = {runtime::BackendKind::kContainer};
    r.layers = {"sha256:base"};
    r.started_at = "2026-12-02T00:00:00Z";
    nodes.push_back(std::make_unique<NodeHeartbeat>(
        kv.get(), 10, [r] { return r; }, 1000));
    if (Status st = nodes.back()->Start(); !st.ok()) {
      fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  std::atomic<int64_t> next_id{0};
  for (int c : a.clients) {
    printf("%s\n", BarePuts(a, c, &next_id).dump().c_str());
    fflush(stdout);
    printf("%s\n", Creates(a, c, &next_id).dump().c_str());
    fflush(stdout);
  }
  printf("%s\n", Batch(a, &next_id).dump().c_str());
  fflush(stdout);
  printf("%s\n", Fill(a, &next_id).dump().c_str());
  fflush(stdout);
  for (auto& n : nodes) n->Stop(true);
  return 0;
}
