#include "server/http_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <optional>
#include <thread>

#include "base/ids.h"
#include "base/utf8.h"
#include "server/auth.h"
#include "server/http_service.h"
#include "server/route_table.h"

namespace warren::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr size_t kJsonBodyLimit = 8ull << 20;  // of a request no route takes

http::status HttpStatus(Code c) { return static_cast<http::status>(HttpStatusOf(c)); }

struct Reply {
  http::status status = http::status::ok;
  std::string content_type = "application/json";
  std::string body;
  bool close = false;
  std::string allow;  // with 405: the methods the path takes (the Allow header)
  // A failure of the server's or node's own (500): the tenant gets the operation and the
  // request id, the log gets the whole status, which may name host paths.
  std::string internal_detail;
  int retry_after_s = 0;  // with 429 or 503: the Retry-After header
  std::vector<std::pair<std::string, std::string>> headers;  // the service's own
};

// Output strings are sanitized already; `replace` keeps any stray invalid byte from turning a
// reply into an exception.
Reply JsonReply(http::status st, const json& j) {
  return {st, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

std::string PercentDecode(std::string_view s, bool* ok) {
  std::string out;
  *ok = true;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size() || !isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        *ok = false;
        return out;
      }
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else if (s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct Target {
  std::vector<std::string> segs;  // decoded path segments
  Query query;
};

Result<Target> ParseTarget(std::string_view target) {
  Target t;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  bool ok = true;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) t.segs.push_back(PercentDecode(path.substr(i, j - i), &ok));
    if (!ok) return Invalid("bad percent-encoding in path");
    i = j + 1;
  }
  if (q != std::string_view::npos) {
    std::string_view qs = target.substr(q + 1);
    size_t k = 0;
    while (k <= qs.size()) {
      size_t amp = qs.find('&', k);
      if (amp == std::string_view::npos) amp = qs.size();
      std::string_view kv = qs.substr(k, amp - k);
      if (!kv.empty()) {
        size_t eq = kv.find('=');
        std::string key = PercentDecode(kv.substr(0, eq), &ok);
        std::string val = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), &ok);
        if (!ok) return Invalid("bad percent-encoding in query");
        auto& slot = t.query[key];
        slot = slot.empty() ? val : slot + "&" + val;  // repeated keys (label=...) joined
      }
      k = amp + 1;
    }
  }
  return t;
}

// The request's headers by lower-case name (repeated ones joined by ", ").
Headers HeadersOf(const http::request_parser<http::empty_body>::value_type& req) {
  Headers out;
  for (const auto& f : req) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    auto& slot = out[name];
    slot = slot.empty() ? std::string(f.value()) : slot + ", " + std::string(f.value());
  }
  return out;
}

// BodyTo::kStream's body: the read end of a pipe the front end writes the body into as it
// arrives. Whether the body came whole is told apart from a cut-off one by `state`, set
// before the write end is closed.
class PipeBody : public BodyStream {
 public:
  enum State { kArriving, kComplete, kCut };
  // `stopping`: the server is going; a reader waiting for bytes that will never come (the
  // event loop that writes them is stopped) gives up.
  PipeBody(int read_fd, std::shared_ptr<std::atomic<bool>> stopping)
      : fd_(read_fd), stopping_(std::move(stopping)) {}
  ~PipeBody() override { CloseReader(); }
  Result<size_t> Read(char* buf, size_t n) override {
    for (;;) {
      const int fd = fd_.load();
      if (fd < 0) return Invalid("the request body was cut off");
      pollfd p{fd, POLLIN, 0};
      const int ready = poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR)
        return Status(Code::kInvalid, "read request body", "", "poll failed", errno);
      if (ready <= 0) {
        if (stopping_->load())
          return Status(Code::kUnavailable, "read request body", "", "the server is stopping");
        continue;
      }
      ssize_t k = read(fd, buf, n);
      if (k > 0) return static_cast<size_t>(k);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return Status(Code::kInvalid, "read request body", "", "read failed", errno);
      if (state.load(std::memory_order_acquire) == kComplete) return size_t{0};
      return Invalid("the request body was cut off");
    }
  }
  // The handler answered: what it did not read is refused (the writer gets EPIPE).
  void CloseReader() {
    const int fd = fd_.exchange(-1);
    if (fd >= 0) close(fd);
  }
  std::atomic<int> state{kArriving};

 private:
  std::atomic<int> fd_;
  std::shared_ptr<std::atomic<bool>> stopping_;
};

Method ToMethod(http::verb v) {
  switch (v) {
    case http::verb::get:
      return Method::kGet;
    case http::verb::head:
      return Method::kHead;
    case http::verb::post:
      return Method::kPost;
    case http::verb::put:
      return Method::kPut;
    case http::verb::delete_:
      return Method::kDelete;
    default:
      return Method::kOther;
  }
}

}  // namespace

struct HttpServer::Impl {
  Impl(HttpService* s, ServerOptions o)
      : service(s),
        opts(std::move(o)),
        blocking(static_cast<size_t>(opts.blocking_threads)),
        acceptor(ioc) {}

  // Open while the io_context lives: a record's notifier posts to it only through the gate.
  struct PostGate {
    std::mutex mu;
    bool open = true;
  };
  HttpService* service;
  ServerOptions opts;
  std::shared_ptr<PostGate> gate = std::make_shared<PostGate>();
  // Set by Stop before it waits for the blocking pool: streamed bodies' readers give up.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);
  net::io_context ioc;
  net::thread_pool blocking;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;

  // Runs `f` on the blocking pool and resumes the caller on its own executor.
  template <typename F>
  net::awaitable<std::invoke_result_t<F>> Blocking(F f) {
    using R = std::invoke_result_t<F>;
    co_return co_await net::co_spawn(
        blocking, [f = std::move(f)]() mutable -> net::awaitable<R> { co_return f(); },
        net::use_awaitable);
  }

  Reply Error(const Status& st) {
    service->CountError(st.code());
    if (st.code() == Code::kInternal) {
      Reply r = JsonReply(HttpStatus(st.code()), json::object());
      r.internal_detail = st.ToString();
      if (r.internal_detail.empty()) r.internal_detail = "internal error";
      r.body = st.op();  // the message is made with the request id (Session)
      return r;
    }
    Reply r = JsonReply(
        HttpStatus(st.code()),
        {{"error", {{"code", CodeName(st.code())}, {"message", SanitizeUtf8(st.ToString())}}}});
    r.retry_after_s = st.retry_after_s();
    return r;
  }

  // Waits until `rec` changes (output or completion) or `timeout` passes.
  net::awaitable<void> WaitChange(const std::shared_ptr<node::ExecRecord>& rec, uint64_t after,
                                  std::chrono::seconds timeout) {
    auto ex = co_await net::this_coro::executor;
    auto timer = std::make_shared<net::steady_timer>(ex, timeout);
    // The notifier runs on a node thread; cancelling through the session's strand means it
    // cannot run before we are suspended in async_wait below. A record may outlive the server
    // (and its io_context): the notifier owns neither the timer nor the right to post once
    // the server stopped (the gate).
    std::weak_ptr<net::steady_timer> weak_timer = timer;
    std::weak_ptr<PostGate> weak_gate = gate;
    // No copy of the executor in the notifier: a record may destroy it after the io_context.
    auto snap = rec->Poll(after, [weak_timer, weak_gate] {
      auto g = weak_gate.lock();
      if (!g) return;
      std::lock_guard<std::mutex> lock(g->mu);
      if (!g->open) return;
      if (auto t = weak_timer.lock()) net::post(t->get_executor(), [t] { t->cancel(); });
    });
    if (!snap.chunks.empty() || snap.done) co_return;
    boost::system::error_code ec;
    co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  }

  net::awaitable<Reply> ExecWait(std::shared_ptr<node::ExecRecord> rec) {
    while (!rec->done()) co_await WaitChange(rec, UINT64_MAX, std::chrono::seconds(30));
    co_return JsonReply(http::status::ok, rec->ResultJson());
  }

  // NDJSON stream of an exec's output from seq `after`, ending with the result line.
  net::awaitable<void> Stream(beast::tcp_stream& stream, unsigned version,
                              std::shared_ptr<node::ExecRecord> rec, uint64_t after, bool exact) {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "warren");
    res.set(http::field::content_type, "application/x-ndjson");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    stream.expires_never();
    co_await http::async_write_header(stream, sr, net::use_awaitable);
    // A quiet command still shows signs of life: a heartbeat line every 15 s, so clients and
    // proxies can tell a long silence from a dead connection. It has the shape of an output
    // line with no data (and the last seq sent): a reader that joins `data` by `stream` is
    // undisturbed, and one that knows `heartbeat` skips it.
    constexpr auto kHeartbeat = std::chrono::seconds(15);
    auto last_write = std::chrono::steady_clock::now();
    for (;;) {
      auto snap = rec->Poll(after, nullptr);
      std::string out;
      if (snap.chunks.empty() && !snap.done &&
          std::chrono::steady_clock::now() - last_write >= kHeartbeat)
        out = json{{"seq", after}, {"stream", "stdout"}, {"data", ""}, {"heartbeat", true}}.dump() +
              "\n";
      for (const auto& c : snap.chunks) {
        out += node::ChunkJson(c, rec->binary() || exact).dump() + "\n";
        after = c.seq;
      }
      bool finished = snap.done && snap.chunks.empty();
      if (finished) {
        json last = {{"seq", rec->last_seq() + 1}, {"result", rec->ResultJson()}};
        out += last.dump() + "\n";
      }
      if (!out.empty()) {
        co_await net::async_write(stream, http::make_chunk(net::buffer(out)), net::use_awaitable);
        last_write = std::chrono::steady_clock::now();
      }
      if (finished) {
        co_await net::async_write(stream, http::make_chunk_last(), net::use_awaitable);
        co_return;
      }
      if (snap.chunks.empty()) co_await WaitChange(rec, after, kHeartbeat);
    }
  }

  // A feed's bytes as a chunked body until it is done. The feed is cancelled if the client
  // goes away (or the server stops) first.
  net::awaitable<void> WriteFeed(beast::tcp_stream& stream, unsigned version,
                                 std::shared_ptr<StreamFeed> feed,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
    struct CancelUnlessDone {
      StreamFeed* f;
      bool done = false;
      ~CancelUnlessDone() {
        if (!done) f->Cancel();
      }
    } guard{feed.get()};
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "warren");
    res.set(http::field::content_type, feed->content_type());
    for (const auto& [k, v] : extra) res.set(k, v);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    stream.expires_never();
    co_await http::async_write_header(stream, sr, net::use_awaitable);
    auto ex = co_await net::this_coro::executor;
    for (;;) {
      auto timer = std::make_shared<net::steady_timer>(ex);
      // As in WaitChange: the notifier may run on any thread, after the server stopped.
      std::weak_ptr<net::steady_timer> weak_timer = timer;
      std::weak_ptr<PostGate> weak_gate = gate;
      StreamFeed::Take take;
      try {
        take = feed->Poll([weak_timer, weak_gate] {
          auto g = weak_gate.lock();
          if (!g) return;
          std::lock_guard<std::mutex> lock(g->mu);
          if (!g->open) return;
          if (auto t = weak_timer.lock()) net::post(t->get_executor(), [t] { t->cancel(); });
        });
      } catch (const std::exception& e) {
        // Mid-body no error can be answered: the connection goes (the client sees the
        // stream cut off), the server's log says why.
        spdlog::error("stream feed failed: {}", e.what());
        throw boost::system::system_error(net::error::operation_aborted);
      }
      if (!take.bytes.empty())
        co_await net::async_write(stream, http::make_chunk(net::buffer(take.bytes)),
                                  net::use_awaitable);
      if (take.done) {
        guard.done = true;
        co_await net::async_write(stream, http::make_chunk_last(), net::use_awaitable);
        co_return;
      }
      if (!take.bytes.empty()) continue;  // more may be ready at once
      timer->expires_after(take.wait);
      boost::system::error_code ec;
      co_await timer->async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }

  net::awaitable<Reply> Route(beast::tcp_stream& stream, beast::flat_buffer& buf,
                              http::request_parser<http::empty_body>& hp, bool* streamed);

  // BodyTo::kStream: runs the handler on the blocking pool while this coroutine writes the
  // body into its pipe as it arrives; then answers what the handler returned.
  net::awaitable<Reply> StreamBody(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                   http::request_parser<http::empty_body>& hp, unsigned version,
                                   uint64_t limit, int route, HttpRequest& req, bool* streamed);

  // The front end's reply to a service's answer: long-lived ones (an exec's end or stream)
  // are served here, on the event loop.
  net::awaitable<Reply> Answer(beast::tcp_stream& stream, unsigned version, HttpReply r,
                               bool* streamed);
  net::awaitable<void> Session(tcp::socket sock);
  net::awaitable<void> Listen();
};

net::awaitable<Reply> HttpServer::Impl::Route(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                              http::request_parser<http::empty_body>& hp,
                                              bool* streamed) {
  // `hp` is moved into a body parser below: take what we need from the header first.
  const auto& hreq = hp.get();
  const unsigned version = hreq.version();
  const std::string target_str(hreq.target());
  auto target = ParseTarget(target_str);
  if (!target.ok()) co_return Error(target.status());
  const RouteTable& table = service->routes();
  const RouteMatch match = table.Match(ToMethod(hreq.method()), target->segs);
  const RouteSpec* spec = match.index >= 0 ? &table[match.index] : nullptr;

  // Every path but the public ones needs a token, unknown paths included: a 404 says nothing
  // to whoever has none.
  static const Principal kAnonymous{"anonymous", {}, {}};
  std::optional<Principal> principal;
  if (!match.public_path) {
    principal = service->Authenticate(hreq[http::field::authorization]);
    if (!principal) {
      Reply r = Error(Status(Code::kUnauthorized, "", "", "missing or wrong bearer token"));
      r.close = true;  // the body (if any) was not read
      co_return r;
    }
    if (spec && !spec->scope.empty() && !principal->Allows(std::string(spec->scope))) {
      Reply r = Error(Status(Code::kForbidden, "", "",
                             "this token lacks the `" + std::string(spec->scope) + "` scope"));
      r.close = true;
      co_return r;
    }
  }
  const Principal& who = principal ? *principal : kAnonymous;
  const Headers headers = HeadersOf(hreq);
  if (spec) {
    Status admitted = service->Admit(match.index, headers);
    if (!admitted.ok()) {
      bool unused = false;
      Reply r = co_await Answer(stream, version, service->Refusal(match.index, admitted), &unused);
      // A small body is read and dropped, so the client (which may still be sending it) gets
      // the answer rather than a reset connection; a large one is not taken at all.
      constexpr uint64_t kDrainLimit = 1 << 20;
      if (hreq[http::field::expect] == "100-continue" ||
          (hp.content_length() && *hp.content_length() > kDrainLimit)) {
        r.close = true;
        co_return r;
      }
      http::request_parser<http::string_body> drain{std::move(hp)};
      drain.body_limit(kDrainLimit);
      beast::error_code ec;
      stream.expires_after(std::chrono::seconds(30));
      co_await http::async_read(stream, buf, drain, net::redirect_error(net::use_awaitable, ec));
      r.close = static_cast<bool>(ec);
      co_return r;
    }
  }
  if (hreq[http::field::expect] == "100-continue") {
    http::response<http::empty_body> cont{http::status::continue_, hreq.version()};
    co_await http::async_write(stream, cont, net::use_awaitable);
  }

  const uint64_t limit = spec ? spec->body_limit : kJsonBodyLimit;
  // Refuse an oversized declared length before any buffer is sized from it.
  if (hp.content_length() && *hp.content_length() > limit) {
    Reply r = Error(Invalid("request body larger than " + std::to_string(limit) + " bytes"));
    r.status = http::status::payload_too_large;
    r.close = true;
    co_return r;
  }
  HttpRequest req{who, match.params, target->query, {}, {}, headers};
  if (spec && spec->body_to == BodyTo::kStream)
    co_return co_await StreamBody(stream, buf, hp, version, limit, match.index, req, streamed);
  if (spec && spec->body_to == BodyTo::kFile) {
    req.body_file = service->UploadPath();
    if (req.body_file.empty()) co_return Error(Internal("read upload", "", "no upload path"));
    http::request_parser<http::file_body> fp{std::move(hp)};
    fp.body_limit(limit);
    // Beast reads as much as the buffer has room for: without room, a layer arrives 512
    // bytes per recvmsg and per write(2) (~30 MB/s instead of the socket's ~1 GB/s).
    buf.reserve(1 << 20);
    beast::error_code ec;
    fp.get().body().open(req.body_file.c_str(), beast::file_mode::write, ec);
    if (ec) co_return Error(Internal("open upload file", req.body_file, ec.message()));
    stream.expires_after(std::chrono::minutes(30));
    co_await http::async_read(stream, buf, fp, net::redirect_error(net::use_awaitable, ec));
    fp.get().body().close();
    if (ec) {
      unlink(req.body_file.c_str());
      Reply r = Error(Invalid("reading the upload failed: " + ec.message()));
      r.close = true;
      co_return r;
    }
  } else {
    http::request_parser<http::string_body> sp{std::move(hp)};
    sp.body_limit(limit);
    beast::error_code ec;
    stream.expires_after(std::chrono::minutes(5));
    co_await http::async_read(stream, buf, sp, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      Reply r = ec == http::error::body_limit
                    ? Error(Invalid("request body larger than " + std::to_string(limit) + " bytes"))
                    : Error(Invalid("malformed HTTP request: " + ec.message()));
      if (ec == http::error::body_limit) r.status = http::status::payload_too_large;
      r.close = true;
      co_return r;
    }
    req.body = std::move(sp.get().body());
  }
  struct RemoveFile {
    std::string p;
    ~RemoveFile() {
      if (!p.empty()) unlink(p.c_str());
    }
  } remove_upload{req.body_file};

  if (!spec) {
    if (match.allow.empty()) co_return Error(NotFound("path", target_str));
    // A method the path does not take: 405 with the ones it takes (code `invalid`, like 413).
    Reply r = Error(Invalid("method not allowed on this path (it takes " + match.allow + ")"));
    r.status = http::status::method_not_allowed;
    r.allow = match.allow;
    co_return r;
  }
  HttpReply answer = co_await Blocking([&] { return service->Handle(match.index, req); });
  co_return co_await Answer(stream, version, std::move(answer), streamed);
}

net::awaitable<Reply> HttpServer::Impl::StreamBody(beast::tcp_stream& stream,
                                                   beast::flat_buffer& buf,
                                                   http::request_parser<http::empty_body>& hp,
                                                   unsigned version, uint64_t limit, int route,
                                                   HttpRequest& req, bool* streamed) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    co_return Error(Status(Code::kInternal, "make request body pipe", "", "pipe2 failed", errno));
  (void)fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);  // fewer wakeups for a large upload
  auto body = std::make_shared<PipeBody>(fds[0], stopping);
  auto ex = co_await net::this_coro::executor;
  net::posix::stream_descriptor writer(ex, fds[1]);
  req.body_stream = body.get();

  // The handler runs beside this coroutine. It is told apart from its end by a flag and a
  // timer that only this connection's strand touches: the end is posted to it.
  auto done = std::make_shared<net::steady_timer>(ex, std::chrono::steady_clock::time_point::max());
  auto finished = std::make_shared<bool>(false);
  auto answer = std::make_shared<HttpReply>();
  auto failure = std::make_shared<std::string>();
  net::post(blocking, [this, route, &req, body, answer, failure, done, finished] {
    try {
      *answer = service->Handle(route, req);
    } catch (const std::exception& e) {
      *failure = e.what();
    }
    body->CloseReader();
    net::post(done->get_executor(), [done, finished] {
      *finished = true;
      done->cancel();
    });
  });

  http::request_parser<http::buffer_body> bp{std::move(hp)};
  bp.body_limit(limit);
  std::vector<char> chunk(256 << 10);
  stream.expires_after(std::chrono::minutes(30));
  bool reader_gone = false;
  uint64_t dropped = 0;
  constexpr uint64_t kDrainLimit = 1 << 20;  // read and dropped after the handler answered
  while (!bp.is_done()) {
    bp.get().body().data = chunk.data();
    bp.get().body().size = chunk.size();
    beast::error_code ec;
    co_await http::async_read(stream, buf, bp, net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;  // the client went away, or sent more than the limit
    const size_t n = chunk.size() - bp.get().body().size;
    if (reader_gone) {
      if ((dropped += n) > kDrainLimit) break;
      continue;
    }
    if (n == 0) continue;
    boost::system::error_code wec;
    co_await net::async_write(writer, net::buffer(chunk.data(), n),
                              net::redirect_error(net::use_awaitable, wec));
    if (wec) reader_gone = true;  // the handler answered without reading the rest
  }
  const bool complete = bp.is_done();
  body->state.store(complete ? PipeBody::kComplete : PipeBody::kCut, std::memory_order_release);
  boost::system::error_code ignored;
  writer.close(ignored);
  if (!*finished) {
    boost::system::error_code ec;
    co_await done->async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  Reply r;
  if (!failure->empty()) {
    r = Error(Internal("handle request", "", *failure));
  } else {
    r = co_await Answer(stream, version, std::move(*answer), streamed);
  }
  if (!complete) r.close = true;  // the rest of the body is still on its way, or never came
  co_return r;
}

net::awaitable<Reply> HttpServer::Impl::Answer(beast::tcp_stream& stream, unsigned version,
                                               HttpReply r, bool* streamed) {
  switch (r.kind) {
    case HttpReply::kError:
      co_return Error(r.error);
    case HttpReply::kWaitExec:
      co_return co_await ExecWait(std::move(r.exec));
    case HttpReply::kStreamExec:
      *streamed = true;
      co_await Stream(stream, version, std::move(r.exec), r.after, r.exact);
      co_return Reply{};
    case HttpReply::kStreamFeed:
      *streamed = true;
      co_await WriteFeed(stream, version, std::move(r.feed), r.headers);
      co_return Reply{};
    case HttpReply::kBody:
      break;
  }
  Reply out{static_cast<http::status>(r.status), std::move(r.content_type), std::move(r.body)};
  out.headers = std::move(r.headers);
  co_return out;
}

net::awaitable<void> HttpServer::Impl::Session(tcp::socket sock) {
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buf;
  for (;;) {
    http::request_parser<http::empty_body> hp;
    hp.header_limit(32 * 1024);
    hp.body_limit(boost::none);  // the body parser that takes over sets the real limit
    stream.expires_after(std::chrono::minutes(5));  // idle keep-alive connection
    beast::error_code ec;
    co_await http::async_read_header(stream, buf, hp, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec != http::error::end_of_stream && ec != net::error::eof &&
          ec != beast::error::timeout && ec != net::error::connection_reset) {
        // Garbage instead of HTTP: answer once, then close.
        http::response<http::string_body> res{http::status::bad_request, 11};
        res.set(http::field::content_type, "application/json");
        res.body() =
            json{{"error",
                  {{"code", "invalid"}, {"message", "malformed HTTP request: " + ec.message()}}}}
                .dump() +
            "\n";
        res.keep_alive(false);
        res.prepare_payload();
        co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
      }
      break;
    }
    unsigned version = hp.get().version();
    bool keep_alive = hp.get().keep_alive();
    bool streamed = false;
    // One id per request, in the response header and the log line, so a client's report
    // ("my create failed") can be matched with what the daemon saw.
    const std::string request_id = RandomHex(6);
    const std::string method(hp.get().method_string());
    std::string path(hp.get().target());
    if (size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const auto t0 = std::chrono::steady_clock::now();
    Reply reply;
    try {
      reply = co_await Route(stream, buf, hp, &streamed);
    } catch (const boost::system::system_error&) {
      break;  // the client went away mid-stream
    } catch (const std::exception& e) {
      // A bug must not take the daemon down: answer 500 and drop the connection.
      reply = Error(Internal("handle request", "", e.what()));
      reply.close = true;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int status = streamed ? 200 : static_cast<int>(reply.status);
    if (path != "/healthz" && path != "/metrics") {
      // Structured: key=value pairs, the request id first.
      if (status >= 500)
        spdlog::warn("req={} method={} path={} status={} ms={:.1f} error={}", request_id, method,
                     path, status, ms, reply.body.substr(0, 300));
      else
        spdlog::info("req={} method={} path={} status={} ms={:.1f}", request_id, method, path,
                     status, ms);
    }
    if (streamed) {
      if (!keep_alive) break;
      continue;
    }
    if (!reply.internal_detail.empty()) {
      spdlog::error("req={} internal error: {}", request_id, reply.internal_detail);
      const std::string op = reply.body.empty() ? "request" : reply.body;
      reply.body =
          JsonReply(reply.status,
                    {{"error",
                      {{"code", "internal"},
                       {"message", SanitizeUtf8(op) + ": internal error (request " + request_id +
                                       "; the server's log has the details)"}}}})
              .body;
    }
    http::response<http::string_body> res{reply.status, version};
    res.set(http::field::server, "warren");
    res.set("X-Request-Id", request_id);
    if (!reply.content_type.empty()) res.set(http::field::content_type, reply.content_type);
    if (!reply.allow.empty()) res.set(http::field::allow, reply.allow);
    if (reply.retry_after_s > 0)
      res.set(http::field::retry_after, std::to_string(reply.retry_after_s));
    for (const auto& [k, v] : reply.headers) res.set(k, v);
    res.keep_alive(keep_alive && !reply.close);
    res.body() = std::move(reply.body);
    res.prepare_payload();
    stream.expires_after(std::chrono::minutes(5));
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> HttpServer::Impl::Listen() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket sock = co_await acceptor.async_accept(net::make_strand(ioc),
                                                      net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (ec == net::error::operation_aborted) co_return;
      continue;  // EMFILE and friends: keep serving the connections we have
    }
    sock.set_option(tcp::no_delay(true), ec);
    auto ex = sock.get_executor();
    net::co_spawn(ex, Session(std::move(sock)), net::detached);
  }
}

HttpServer::HttpServer(HttpService* service, ServerOptions opts)
    : impl_(std::make_unique<Impl>(service, std::move(opts))) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  if (!impl_) return Invalid("start HTTP server: it was stopped");
  const std::string& l = impl_->opts.listen;
  size_t colon = l.rfind(':');
  if (colon == std::string::npos) return Invalid("listen address must be ADDR:PORT", l);
  std::string host = l.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) return Invalid("bad listen address: " + ec.message(), l);
  int port = atoi(l.c_str() + colon + 1);
  if (port < 0 || port > 65535) return Invalid("bad port", l);
  tcp::endpoint ep(addr, static_cast<uint16_t>(port));
  auto& acc = impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(1024, ec);
  if (ec) return Status(Code::kUnavailable, "listen", l, ec.message());
  // A streamed body is written into a pipe whose reader (the handler) may have answered and
  // closed it: EPIPE, never the signal that would end the daemon.
  signal(SIGPIPE, SIG_IGN);
  net::co_spawn(impl_->ioc, impl_->Listen(), net::detached);
  for (int i = 0; i < impl_->opts.io_threads; ++i)
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  port_ = acc.local_endpoint().port();
  return Status::Ok();
}

uint16_t HttpServer::port() const { return port_; }

void HttpServer::Stop() {
  if (!impl_) return;
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  impl_->stopping->store(true);
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
  impl_->blocking.stop();
  impl_->blocking.join();
  {
    std::lock_guard<std::mutex> lock(impl_->gate->mu);
    impl_->gate->open = false;
  }
  // Gone with the io_context: every connection still open (a stream, a keep-alive), so that
  // clients see the server leave rather than wait on a socket no one reads.
  impl_.reset();
}

}  // namespace warren::server
