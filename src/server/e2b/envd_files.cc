// envd's filesystem.Filesystem service, its /files upload and download, and /health.

#include <chrono>

#include "base/utf8.h"
#include "server/api_types.h"
#include "server/e2b/connect_protocol.h"
#include "server/e2b/e2b_service.h"
#include "server/e2b/envd_target.h"
#include "server/e2b/multipart.h"
#include "server/e2b/sandbox_file_writer.h"
#include "server/e2b/watch_feed.h"

namespace warren::server::e2b {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

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

std::optional<Clock::time_point> Deadline(const HttpRequest& r) {
  return CallDeadline(r.Header("connect-timeout-ms"));
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
  auto msg = ParseStreamRequest(r.body);
  if (!msg.ok()) return StreamError(msg.status());
  auto path = PathField(*msg);
  if (!path.ok()) return StreamError(path.status());
  const std::string dir = ResolvePath(*path);
  const uint32_t depth = msg->value("recursive", false) ? 64 : 1;
  auto slot = watches_->Take(t.id);
  if (!slot.ok()) return StreamError(slot.status());
  FsTools tools = ToolsFor(t.id);
  auto initial = tools.List(dir, depth);
  if (!initial.ok()) return StreamError(initial.status());
  return HttpReply::Feed(std::make_shared<WatchFeed>(
      std::move(tools), dir, depth, std::move(*initial),
      KeepaliveInterval(r.Header("keepalive-ping-interval")), Deadline(r), std::move(*slot)));
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

namespace {

// The parts of a multipart upload, each written into the sandbox as its bytes arrive.
class PartsToSandbox : public MultipartStream::Handler {
 public:
  PartsToSandbox(Api* api, const Principal& who, std::string sandbox, std::string query_path)
      : api_(api), who_(who), sandbox_(std::move(sandbox)), query_path_(std::move(query_path)) {}
  Status BeginPart(const MultipartPart& part) override {
    // One file to the query's path (a single write), or each to its own (the part's filename).
    std::string target = !query_path_.empty() && written_.empty() ? query_path_ : part.filename;
    if (target.empty()) return Invalid("a part names no file path");
    if (target.find('\0') != std::string::npos) return Invalid("bad path", target);
    file_ = std::make_unique<SandboxFileWriter>(api_, who_, sandbox_, ResolvePath(target));
    return Status::Ok();
  }
  Status PartData(std::string_view bytes) override { return file_->Write(bytes); }
  Status EndPart() override {
    WARREN_RETURN_IF_ERROR(file_->Close());
    written_.push_back(WriteInfo(file_->path()));
    file_.reset();
    return Status::Ok();
  }
  json written() const { return written_; }

 private:
  Api* api_;
  const Principal& who_;
  const std::string sandbox_, query_path_;
  std::unique_ptr<SandboxFileWriter> file_;
  json written_ = json::array();
};

}  // namespace

HttpReply E2bService::FilesPost(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  const std::string content_type = r.Header("content-type");
  const std::string encoding = r.Header("content-encoding");
  std::string query_path;
  if (auto it = r.query.find("path"); it != r.query.end()) query_path = it->second;
  if (!encoding.empty() && encoding != "identity" && encoding != "gzip")
    return RestError(Invalid("Content-Encoding must be gzip"));
  std::optional<GzipInflater> gunzip;
  if (encoding == "gzip") gunzip.emplace();

  // The body, piece by piece as it arrives, to either a multipart parser or one file.
  std::optional<MultipartStream> multipart;
  std::optional<PartsToSandbox> parts;
  std::unique_ptr<SandboxFileWriter> single;
  if (content_type.rfind("multipart/", 0) == 0) {
    auto boundary = MultipartBoundary(content_type);
    if (!boundary.ok()) return RestError(boundary.status());
    multipart.emplace(*boundary);
    parts.emplace(api_, envd_, t.id, query_path);
  } else {
    if (query_path.empty()) return RestError(Invalid("query parameter `path` is required"));
    if (query_path.find('\0') != std::string::npos) return RestError(Invalid("bad path"));
    single = std::make_unique<SandboxFileWriter>(api_, envd_, t.id, ResolvePath(query_path));
  }
  auto take = [&](std::string_view bytes) -> Status {
    if (multipart) return multipart->Feed(bytes, &*parts);
    return single->Write(bytes);
  };
  std::string piece(256 << 10, '\0'), inflated;
  for (;;) {
    auto n = r.body_stream->Read(piece.data(), piece.size());
    if (!n.ok()) return RestError(n.status());
    if (*n == 0) break;
    std::string_view got(piece.data(), *n);
    Status st;
    if (gunzip) {
      inflated.clear();
      st = gunzip->Inflate(got, &inflated);
      if (st.ok()) st = take(inflated);
    } else {
      st = take(got);
    }
    if (!st.ok()) return RestError(st);
  }
  if (gunzip)
    if (Status st = gunzip->Finish(); !st.ok()) return RestError(st);
  json written = json::array();
  if (multipart) {
    if (Status st = multipart->Finish(); !st.ok()) return RestError(st);
    written = parts->written();
  } else {
    if (Status st = single->Close(); !st.ok()) return RestError(st);
    written.push_back(WriteInfo(single->path()));
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
