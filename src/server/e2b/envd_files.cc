// envd's filesystem.Filesystem service, its /files upload and download, and /health.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <thread>

#include "base/unique_fd.h"
#include "base/utf8.h"
#include "server/api_types.h"
#include "server/e2b/connect_protocol.h"
#include "server/e2b/e2b_service.h"
#include "server/e2b/envd_target.h"
#include "server/e2b/multipart.h"
#include "server/e2b/watch_feed.h"

namespace warren::server::e2b {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A file this small goes into the sandbox in one message; larger ones stream through `cat`.
constexpr uint64_t kWholeWriteBytes = 8ull << 20;
// One agent message at most (agent/protocol.h's kMaxPayload is 60 KiB): the agent takes or
// refuses a piece whole, so a refused one can simply be sent again.
constexpr size_t kStreamPiece = 56 << 10;
// The most of a listing's or stat's output kept.
constexpr uint64_t kToolOutputBytes = 32ull << 20;
// A stat or listing that takes longer is the sandbox's trouble; a blocking thread of the
// server's is not held for it.
constexpr int kToolTimeoutMs = 30000;

// A filesystem call's error: envd's already_exists for MakeDir's conflict.
HttpReply FsError(const Status& st) {
  if (st.code() == Code::kConflict && st.ToString().find("exists already") != std::string::npos)
    return UnaryError("already_exists", st.ToString());
  return UnaryError(st);
}

// envd's REST error ({"code": <int>, "message"}) for /files.
HttpReply RestError(const Status& st) {
  int status = HttpStatusOf(st.code());
  if (OutOfSpace(st)) status = 507;
  const std::string msg = PublicMessage(st);
  if (st.code() == Code::kConflict) status = 400;  // not a file, a directory's path, ...
  return HttpReply::Json({{"code", status}, {"message", SanitizeUtf8(msg)}}, status);
}

class FailedWatch : public StreamFeed {
 public:
  explicit FailedWatch(std::string frame) : frame_(std::move(frame)) {}
  std::string content_type() const override { return std::string(kStreamContentType); }
  Take Poll(std::function<void()>) override {
    Take t;
    t.bytes = std::move(frame_);
    t.done = true;
    return t;
  }

 private:
  std::string frame_;
};

std::optional<Clock::time_point> Deadline(const HttpRequest& r) {
  const std::string v = r.Header("connect-timeout-ms");
  char* end = nullptr;
  long long ms = v.empty() ? 0 : strtoll(v.c_str(), &end, 10);
  if (ms <= 0 || *end) return std::nullopt;
  return Clock::now() + std::chrono::milliseconds(ms);
}

// Inflates gzip file `src` into a new file `dst`.
Status Gunzip(const std::string& src, const std::string& dst) {
  gzFile in = gzopen(src.c_str(), "rb");
  if (!in) return Invalid("read the gzip upload");
  UniqueFd out(open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) {
    gzclose(in);
    return Status(Code::kInternal, "inflate upload", "", "cannot create a temporary file", errno);
  }
  std::string buf(1 << 20, '\0');
  Status st = Status::Ok();
  for (;;) {
    int n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      st = Invalid("the upload is not valid gzip");
      break;
    }
    if (n == 0) break;
    if (write(out.get(), buf.data(), static_cast<size_t>(n)) != n) {
      st = Status(Code::kInternal, "inflate upload", "", "write failed", errno);
      break;
    }
  }
  gzclose(in);
  return st;
}

json WriteInfo(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return {{"name", slash == std::string::npos ? path : path.substr(slash + 1)},
          {"type", "file"},
          {"path", path}};
}

}  // namespace

FsTools E2bService::ToolsFor(const std::string& id) {
  return FsTools([this, id](std::vector<std::string> argv) -> Result<ToolOutput> {
    auto rec = WARREN_TRY(
        api_->RunInSandbox(envd_, id, std::move(argv), nullptr, kToolOutputBytes, kToolTimeoutMs));
    node::ExecOutcome o = rec->outcome();
    if (o.not_started)  // no /bin/sh in the image
      return Status(Code::kConflict, "run in sandbox", id,
                    "the sandbox's image lacks the tools for it (sh): " + o.error);
    if (!o.error.empty()) return Status(Code::kUnavailable, "run in sandbox", id, o.error);
    return ToolOutput{o.exit_code, rec->RawOutput(1), rec->RawOutput(2)};
  });
}

HttpReply E2bService::FsStat(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return UnaryError(path.status());
  auto e = ToolsFor(t.id).Stat(ResolvePath(*path));
  return e.ok() ? UnaryOk({{"entry", ToJson(*e)}}) : FsError(e.status());
}

HttpReply E2bService::FsListDir(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return UnaryError(path.status());
  uint32_t depth = 1;
  if (msg->contains("depth") && (*msg)["depth"].is_number_unsigned())
    depth = static_cast<uint32_t>(std::min<uint64_t>((*msg)["depth"].get<uint64_t>(), 1000));
  auto entries = ToolsFor(t.id).List(ResolvePath(*path), depth);
  if (!entries.ok()) return FsError(entries.status());
  json out = json::array();
  for (const auto& e : *entries) out.push_back(ToJson(e));
  return UnaryOk({{"entries", out}});
}

HttpReply E2bService::FsMakeDir(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return UnaryError(path.status());
  auto e = ToolsFor(t.id).MakeDir(ResolvePath(*path));
  return e.ok() ? UnaryOk({{"entry", ToJson(*e)}}) : FsError(e.status());
}

HttpReply E2bService::FsMove(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto from = PathField(*msg, "source");
  if (!from.ok()) return UnaryError(from.status());
  auto to = PathField(*msg, "destination");
  if (!to.ok()) return UnaryError(to.status());
  auto e = ToolsFor(t.id).Move(ResolvePath(*from), ResolvePath(*to));
  return e.ok() ? UnaryOk({{"entry", ToJson(*e)}}) : FsError(e.status());
}

HttpReply E2bService::FsRemove(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return UnaryError(path.status());
  Status st = ToolsFor(t.id).Remove(ResolvePath(*path));
  return st.ok() ? UnaryOk(json::object()) : FsError(st);
}

HttpReply E2bService::FsWatchDir(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto fail = [](const Status& st) {
    return HttpReply::Feed(std::make_shared<FailedWatch>(EndStream(st)));
  };
  auto msg = ParseStreamRequest(r.body);
  if (!msg.ok()) return fail(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return fail(path.status());
  const std::string dir = ResolvePath(*path);
  const uint32_t depth = msg->value("recursive", false) ? 64 : 1;
  auto slot = watches_->Take(t.id);
  if (!slot.ok()) return fail(slot.status());
  FsTools tools = ToolsFor(t.id);
  auto initial = tools.List(dir, depth);
  if (!initial.ok()) return fail(initial.status());
  const std::string v = r.Header("keepalive-ping-interval");
  const long keepalive_s = std::clamp(v.empty() ? 15L : strtol(v.c_str(), nullptr, 10), 1L, 300L);
  return HttpReply::Feed(std::make_shared<WatchFeed>(
      std::move(tools), dir, depth, std::move(*initial), std::chrono::seconds(keepalive_s),
      Deadline(r), std::move(*slot)));
}

HttpReply E2bService::FilesGet(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto it = r.query.find("path");
  if (it == r.query.end() || it->second.empty())
    return RestError(Invalid("query parameter `path` is required"));
  auto data = api_->GetFile(envd_, t.id, Query{{"path", ResolvePath(it->second)}});
  if (!data.ok()) return RestError(data.status());
  return HttpReply::Raw(std::move(*data), "application/octet-stream");
}

Status E2bService::WriteFromFile(const std::string& id, const std::string& path, int fd,
                                 uint64_t offset, uint64_t size) {
  auto read_at = [&](uint64_t off, size_t n, std::string* out) -> Status {
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t k = pread(fd, out->data() + got, n - got, static_cast<off_t>(off + got));
      if (k <= 0) return Status(Code::kInternal, "read upload", "", "short read", errno);
      got += static_cast<size_t>(k);
    }
    return Status::Ok();
  };
  if (size <= kWholeWriteBytes) {
    std::string data;
    WARREN_RETURN_IF_ERROR(read_at(offset, size, &data));
    return api_->WriteFile(envd_, id, path, 0644, data);
  }
  // Larger: piece by piece into `cat` in the sandbox, at the pace it writes (the agent holds
  // at most 1 MiB of unread input and says so: then we wait a moment and send again).
  ExecRequest er;
  er.argv = {"/bin/sh", "-c", "mkdir -p -- \"$(dirname -- \"$1\")\" && exec cat > \"$1\"", "sh",
             path};
  er.cwd = "/";
  er.timeout_s = 3600;
  er.wait = false;
  er.stdin_open = true;
  er.max_output_bytes = 64 << 10;
  auto started = WARREN_TRY(api_->StartExec(envd_, id, std::move(er)));
  auto rec = started.rec;
  std::string piece;
  for (uint64_t off = 0; off < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kStreamPiece, size - off));
    WARREN_RETURN_IF_ERROR(read_at(offset + off, n, &piece));
    ExecInput in;
    in.data = std::move(piece);
    for (int attempt = 0;; ++attempt) {
      Status st = api_->WriteExecInput(envd_, id, rec->id(), in);
      if (st.ok()) break;
      if (st.code() != Code::kQuota || attempt > 30000 || rec->done()) {
        (void)api_->SignalExec(envd_, id, rec->id(), SIGKILL);
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    piece = std::move(in.data);
    off += n;
  }
  ExecInput eof;
  eof.eof = true;
  WARREN_RETURN_IF_ERROR(api_->WriteExecInput(envd_, id, rec->id(), eof));
  if (!rec->WaitDone(600000)) return Status(Code::kUnavailable, "write file", path, "timed out");
  node::ExecOutcome o = rec->outcome();
  if (o.exit_code != 0) {
    std::string err = SanitizeUtf8(rec->RawOutput(2).substr(0, 2000));
    if (!o.error.empty()) err = o.error;
    return Status(Code::kInvalid, "write file", path, "writing failed: " + err);
  }
  return Status::Ok();
}

HttpReply E2bService::FilesPost(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  const std::string content_type = r.Header("content-type");
  const std::string encoding = r.Header("content-encoding");
  std::string query_path;
  if (auto it = r.query.find("path"); it != r.query.end()) query_path = it->second;
  std::string body_file = r.body_file;
  struct RemoveLater {
    std::string p;
    ~RemoveLater() {
      if (!p.empty()) unlink(p.c_str());
    }
  } inflated;
  if (!encoding.empty() && encoding != "identity") {
    if (encoding != "gzip") return RestError(Invalid("Content-Encoding must be gzip"));
    inflated.p = body_file + ".inflated";
    Status st = Gunzip(body_file, inflated.p);
    if (!st.ok()) return RestError(st);
    body_file = inflated.p;
  }
  UniqueFd fd(open(body_file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return RestError(Status(Code::kInternal, "read upload", "", "open failed", errno));
  json written = json::array();
  if (content_type.rfind("multipart/", 0) == 0) {
    auto boundary = MultipartBoundary(content_type);
    if (!boundary.ok()) return RestError(boundary.status());
    auto parts = ScanMultipartFile(body_file, *boundary);
    if (!parts.ok()) return RestError(parts.status());
    for (const auto& p : *parts) {
      // One file to the query's path, or each to its own (the part's filename).
      std::string target = !query_path.empty() && parts->size() == 1 ? query_path : p.filename;
      if (target.empty()) return RestError(Invalid("a part names no file path"));
      target = ResolvePath(target);
      Status st = WriteFromFile(t.id, target, fd.get(), p.offset, p.size);
      if (!st.ok()) return RestError(st);
      written.push_back(WriteInfo(target));
    }
  } else {
    if (query_path.empty()) return RestError(Invalid("query parameter `path` is required"));
    struct stat st {};
    if (fstat(fd.get(), &st) != 0)
      return RestError(Status(Code::kInternal, "read upload", "", "fstat failed", errno));
    const std::string target = ResolvePath(query_path);
    Status w = WriteFromFile(t.id, target, fd.get(), 0, static_cast<uint64_t>(st.st_size));
    if (!w.ok()) return RestError(w);
    written.push_back(WriteInfo(target));
  }
  if (written.empty()) return RestError(Invalid("the upload holds no file"));
  return HttpReply::Json(written);
}

HttpReply E2bService::Health(HttpRequest& r) {
  const std::string id = r.Header("e2b-sandbox-id");
  if (id.empty()) return HttpReply::NoContent();  // the server itself
  auto t = EnvdTarget(r);
  if (!t.ok()) return Gone(id);
  return HttpReply::NoContent();
}

}  // namespace warren::server::e2b
