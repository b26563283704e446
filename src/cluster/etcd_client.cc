#include "cluster/etcd_client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <thread>

#include "cluster/etcd_json.h"

namespace warren::cluster {

using nlohmann::json;

namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// Failures where curl never handed the request to etcd: safe to send it elsewhere.
bool NotSent(CURLcode rc, CURL* h) {
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
      rc == CURLE_COULDNT_RESOLVE_PROXY)
    return true;
  // A timeout before the connection was made.
  curl_off_t connected = 0;
  return rc == CURLE_OPERATION_TIMEDOUT &&
         curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected) == CURLE_OK && connected == 0;
}

bool NoLeader(const json& j) {
  if (!j.is_object()) return false;
  auto m = j.find("message");
  return m != j.end() && m->is_string() &&
         m->get_ref<const std::string&>().find("no leader") != std::string::npos;
}

}  // namespace

Result<EtcdOptions> ParseEtcdEndpoints(const std::string& urls) {
  EtcdOptions o;
  std::stringstream in(urls);
  std::string url;
  while (std::getline(in, url, ',')) {
    if (url.empty()) continue;
    while (!url.empty() && url.back() == '/') url.pop_back();
    const bool scheme = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
    const size_t host = url.find("://") + 3;
    if (!scheme || url.size() <= host || url.find('/', host) != std::string::npos)
      return Invalid("an etcd endpoint is http://HOST:PORT or https://HOST:PORT", url);
    o.endpoints.push_back(url);
  }
  if (o.endpoints.empty()) return Invalid("no etcd endpoint given", urls);
  return o;
}

// Idle curl handles, each keeping its connection alive, for any thread to borrow.
class EtcdClient::HandlePool {
 public:
  ~HandlePool() {
    for (CURL* h : free_) curl_easy_cleanup(h);
  }
  struct Release {
    HandlePool* pool;
    void operator()(CURL* h) const { pool->Put(h); }
  };
  using Handle = std::unique_ptr<CURL, Release>;
  Handle Take() {
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        CURL* h = free_.back();
        free_.pop_back();
        return Handle(h, Release{this});
      }
    }
    return Handle(curl_easy_init(), Release{this});
  }

 private:
  void Put(CURL* h) {
    if (!h) return;
    curl_easy_reset(h);  // keeps the connection cache
    MutexLock lock(&mu_);
    free_.push_back(h);
  }
  Mutex mu_;
  std::vector<CURL*> free_ GUARDED_BY(mu_);
};

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), handles_(std::make_unique<HandlePool>()) {
  GlobalInit();
}

EtcdClient::~EtcdClient() = default;

EtcdClient::Counters EtcdClient::counters() const {
  return {requests_.load(), writes_.load(), request_bytes_.load()};
}

Result<json> EtcdClient::Call(const char* path, const json& body, Retry retry,
                              const std::string& op, const std::string& object) {
  const std::string payload = body.dump();
  requests_.fetch_add(1, std::memory_order_relaxed);
  request_bytes_.fetch_add(payload.size(), std::memory_order_relaxed);
  if (retry == Retry::kOnlyIfUnsent) writes_.fetch_add(1, std::memory_order_relaxed);
  const size_t n = options_.endpoints.size();
  const size_t first = preferred_.load(std::memory_order_relaxed);
  Status last(Code::kUnavailable, "etcd " + op, object, "no etcd endpoint");
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.retry_budget_ms);
  auto backoff = std::chrono::milliseconds(50);
  for (size_t i = 0;; ++i) {
    if (i > 0 && i % n == 0) {
      // Every member refused or had no leader: wait a little for an election or a restart.
      if (Clock::now() + backoff >= deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (i > 0 && left <= 0) break;
    const long timeout_ms =
        std::max(200L, std::min(long{options_.request_timeout_ms}, static_cast<long>(left)));
    const size_t idx = (first + i) % n;
    const std::string url = options_.endpoints[idx] + path;
    auto h = handles_->Take();
    if (!h) return Internal("curl_easy_init", op, "out of memory");
    std::string answer;
    struct curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(h.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(h.get(), CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h.get(), CURLOPT_POSTFIELDS, payload.data());
    curl_easy_setopt(h.get(), CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
    curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, AppendBody);
    curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h.get(), CURLOPT_CONNECTTIMEOUT_MS, long{options_.connect_timeout_ms});
    curl_easy_setopt(h.get(), CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h.get(), CURLOPT_TCP_NODELAY, 1L);
    const CURLcode rc = curl_easy_perform(h.get());
    long http = 0;
    curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &http);
    const bool unsent = rc != CURLE_OK && NotSent(rc, h.get());
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      spdlog::debug("etcd {} {}: {}", options_.endpoints[idx], path, curl_easy_strerror(rc));
      if (unsent || retry == Retry::kIdempotent) {
        last = Status(Code::kUnavailable, "etcd " + op, object,
                      std::string("etcd cannot be reached: ") + curl_easy_strerror(rc));
        continue;
      }
      return Status(Code::kUnavailable, "etcd " + op, object,
                    std::string("etcd's answer was lost (the write may have been applied): ") +
                        curl_easy_strerror(rc));
    }
    json j = json::parse(answer, nullptr, false);
    if (http == 200 && j.is_object() && !j.contains("error")) {
      preferred_.store(idx, std::memory_order_relaxed);
      return j;
    }
    Status st = etcd_json::ErrorStatus(j, static_cast<int>(http), op, object);
    if (st.code() == Code::kUnavailable && (retry == Retry::kIdempotent || NoLeader(j))) {
      last = st;
      continue;
    }
    return st;
  }
  return last;
}

Result<RangeResult> EtcdClient::Range(const RangeRequest& req) {
  json j = WARREN_TRY(
      Call("/v3/kv/range", etcd_json::RangeBody(req), Retry::kIdempotent, "range", req.key));
  return etcd_json::ParseRange(j);
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json j = WARREN_TRY(
      Call("/v3/kv/put", etcd_json::PutBody(key, value, lease), Retry::kOnlyIfUnsent, "put", key));
  return etcd_json::ParseRevision(j);
}

Result<int64_t> EtcdClient::Delete(const std::string& key, const std::string& range_end) {
  json j = WARREN_TRY(Call("/v3/kv/deleterange", etcd_json::DeleteBody(key, range_end),
                           Retry::kOnlyIfUnsent, "delete", key));
  return etcd_json::ParseDeleted(j);
}

Result<TxnResult> EtcdClient::Commit(const Txn& txn) {
  const bool writes = std::any_of(txn.success.begin(), txn.success.end(),
                                  [](const TxnOp& op) { return op.kind != TxnOp::Kind::kGet; }) ||
                      std::any_of(txn.failure.begin(), txn.failure.end(),
                                  [](const TxnOp& op) { return op.kind != TxnOp::Kind::kGet; });
  const std::string object =
      txn.compare.empty() ? (txn.success.empty() ? "" : txn.success[0].key) : txn.compare[0].key;
  json j = WARREN_TRY(Call("/v3/kv/txn", etcd_json::TxnBody(txn),
                           writes ? Retry::kOnlyIfUnsent : Retry::kIdempotent, "txn", object));
  return etcd_json::ParseTxn(j);
}

Result<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  // A grant whose answer is lost leaves a lease nobody knows; it expires after its TTL.
  json j = WARREN_TRY(Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}},
                           Retry::kIdempotent, "grant lease", std::to_string(ttl_s) + "s"));
  return etcd_json::ParseLeaseId(j);
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  const std::string id = std::to_string(lease);
  json j = WARREN_TRY(
      Call("/v3/lease/keepalive", json{{"ID", id}}, Retry::kIdempotent, "keep lease alive", id));
  return etcd_json::ParseKeepAlive(j);
}

Status EtcdClient::RevokeLease(int64_t lease) {
  const std::string id = std::to_string(lease);
  auto j = Call("/v3/lease/revoke", json{{"ID", id}}, Retry::kIdempotent, "revoke lease", id);
  return j.status();
}

Status EtcdClient::Compact(int64_t revision) {
  const std::string rev = std::to_string(revision);
  return Call("/v3/kv/compaction", json{{"revision", rev}, {"physical", true}}, Retry::kIdempotent,
              "compact", rev)
      .status();
}

// One watch: a streaming POST /v3/watch on a thread, run by a curl multi handle so that the
// destructor can wake it (curl_multi_wakeup) instead of waiting for the next byte.
class EtcdClient::EtcdWatch : public Watch {
 public:
  EtcdWatch(EtcdClient* client, std::string key, std::string range_end, int64_t next_revision,
            WatchCallbacks callbacks)
      : client_(client),
        key_(std::move(key)),
        range_end_(std::move(range_end)),
        next_(next_revision),
        callbacks_(std::move(callbacks)),
        multi_(curl_multi_init()) {
    thread_ = std::thread([this] { Run(); });
  }
  ~EtcdWatch() override {
    stop_.store(true);
    curl_multi_wakeup(multi_);
    thread_.join();
    curl_multi_cleanup(multi_);
  }

 private:
  void Run() {
    int backoff_ms = 50;
    size_t endpoint = client_->preferred_.load();
    while (!stop_.load()) {
      const size_t delivered_before = delivered_;
      StreamOnce(client_->options_.endpoints[endpoint % client_->options_.endpoints.size()]);
      if (ended_ || stop_.load()) return;
      // The stream broke (a member went away, a timeout): resume elsewhere from next_.
      if (delivered_ > delivered_before) backoff_ms = 50;
      ++endpoint;
      int numfds = 0;
      curl_multi_poll(multi_, nullptr, 0, backoff_ms, &numfds);  // a sleep stop_ can cut
      backoff_ms = std::min(backoff_ms * 2, 2000);
    }
  }

  static size_t OnData(char* data, size_t size, size_t n, void* self) {
    auto* w = static_cast<EtcdWatch*>(self);
    w->buffer_.append(data, size * n);
    size_t nl;
    while ((nl = w->buffer_.find('\n')) != std::string::npos) {
      std::string line = w->buffer_.substr(0, nl);
      w->buffer_.erase(0, nl + 1);
      if (!w->OnLine(line)) return 0;  // aborts the transfer
    }
    return size * n;
  }

  // False when the watch is over.
  bool OnLine(const std::string& line) {
    if (line.find_first_not_of(" \r\t") == std::string::npos) return true;
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("error")) {
      // The stream itself failed (a member lost its leader...): resume elsewhere.
      spdlog::debug("etcd watch {}: {}", key_, line);
      return false;
    }
    auto m = etcd_json::ParseWatchMessage(j);
    if (!m.ok()) return false;
    if (m->compact_revision > 0 || m->canceled) {
      ended_ = true;
      const std::string why = m->compact_revision > 0
                                  ? "revision " + std::to_string(next_) +
                                        " was compacted; list again and watch from there"
                                  : "etcd canceled the watch: " + m->cancel_reason;
      if (callbacks_.on_end) callbacks_.on_end(Status(Code::kConflict, "etcd watch", key_, why));
      return false;
    }
    if (!m->events.empty()) {
      next_ = m->events.back().kv.mod_revision + 1;
      ++delivered_;
      if (callbacks_.on_events) callbacks_.on_events(m->events);
    } else if (!m->created && m->revision >= next_) {
      next_ = m->revision + 1;  // a progress notification: nothing changed up to here
    }
    return true;
  }

  void StreamOnce(const std::string& endpoint) {
    CURL* h = curl_easy_init();
    if (!h) return;
    const std::string url = endpoint + "/v3/watch";
    const std::string body = etcd_json::WatchCreateBody(key_, range_end_, next_).dump();
    buffer_.clear();
    struct curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnData);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, this);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, long{client_->options_.connect_timeout_ms});
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
    curl_multi_add_handle(multi_, h);
    int running = 1;
    while (running && !stop_.load()) {
      if (curl_multi_perform(multi_, &running) != CURLM_OK) break;
      if (!running) break;
      int numfds = 0;
      curl_multi_poll(multi_, nullptr, 0, 1000, &numfds);
    }
    curl_multi_remove_handle(multi_, h);
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
  }

  EtcdClient* const client_;
  const std::string key_, range_end_;
  int64_t next_;  // the revision to resume from; only the watch thread touches it
  const WatchCallbacks callbacks_;
  CURLM* const multi_;
  std::string buffer_;
  bool ended_ = false;
  size_t delivered_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Result<std::unique_ptr<Watch>> EtcdClient::WatchRange(const std::string& key,
                                                      const std::string& range_end,
                                                      int64_t start_revision,
                                                      WatchCallbacks callbacks) {
  if (start_revision <= 0) {
    // "From now" made concrete, so that a stream that breaks before etcd confirms it resumes
    // from here rather than from a later "now".
    auto now = Range({.key = key, .range_end = range_end, .count_only = true});
    if (!now.ok()) return now.status();
    start_revision = now->revision + 1;
  }
  return std::unique_ptr<Watch>(
      new EtcdWatch(this, key, range_end, start_revision, std::move(callbacks)));
}

}  // namespace warren::cluster
