#include "server/e2b/sandbox_file_writer.h"

#include <signal.h>
#include <zlib.h>

#include <chrono>
#include <thread>

#include "base/utf8.h"
#include "server/api_types.h"

namespace warren::server::e2b {

SandboxFileWriter::SandboxFileWriter(Api* api, const Principal& who, std::string sandbox,
                                     std::string path)
    : api_(api), who_(who), sandbox_(std::move(sandbox)), path_(std::move(path)) {}

SandboxFileWriter::~SandboxFileWriter() {
  if (cat_ && !cat_->done())
    (void)api_->SignalExec(who_, sandbox_, cat_->id(),
                           SIGTERM);  // its trap removes the partial file
}

Status SandboxFileWriter::Write(std::string_view data) {
  if (closed_) return Status(Code::kInternal, "write file", path_, "written after its close");
  if (!cat_) {
    if (held_.size() + data.size() <= kWholeWriteBytes) {
      held_.append(data);
      return Status::Ok();
    }
    WARREN_RETURN_IF_ERROR(StartStreaming());
    std::string held = std::move(held_);
    held_.clear();
    WARREN_RETURN_IF_ERROR(Send(held));
  }
  return Send(data);
}

Status SandboxFileWriter::StartStreaming() {
  // Into "PATH.upload-PID" beside it, moved over PATH when whole; the partial file goes if
  // `cat` is killed or fails.
  ExecRequest er;
  er.argv = {"/bin/sh", "-c",
             "d=$(dirname -- \"$1\") && mkdir -p -- \"$d\" && t=\"$1.upload-$$\" && "
             "trap 'rm -f -- \"$t\"' EXIT HUP TERM && cat > \"$t\" && mv -f -- \"$t\" \"$1\"",
             "sh", path_};
  er.cwd = "/";
  er.timeout_s = 6 * 3600;
  er.wait = false;
  er.stdin_open = true;
  er.max_output_bytes = 64 << 10;
  auto started = WARREN_TRY(api_->StartExec(who_, sandbox_, std::move(er)));
  cat_ = started.rec;
  return Status::Ok();
}

Status SendInputInPieces(Api* api, const Principal& who, const std::string& sandbox,
                         const node::ExecRecord& rec, std::string_view data, int max_attempts) {
  size_t off = 0;
  do {
    ExecInput piece;
    piece.data = std::string(data.substr(off, kInputPieceBytes));
    Status st = api->WriteExecInput(who, sandbox, rec.id(), piece);
    // The agent holds 1 MiB unread at most: the command is behind; wait a moment and send
    // the same piece again.
    for (int attempt = 0; st.code() == Code::kQuota && attempt < max_attempts && !rec.done();
         ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      st = api->WriteExecInput(who, sandbox, rec.id(), piece);
    }
    WARREN_RETURN_IF_ERROR(st);
    off += piece.data.size();
  } while (off < data.size());
  return Status::Ok();
}

Status SandboxFileWriter::Send(std::string_view data) {
  if (data.empty()) return Status::Ok();
  // Up to a minute without progress.
  return SendInputInPieces(api_, who_, sandbox_, *cat_, data, 30000);
}

Status SandboxFileWriter::Close() {
  closed_ = true;
  if (!cat_) return api_->WriteFile(who_, sandbox_, path_, 0644, held_);
  ExecInput eof;
  eof.eof = true;
  WARREN_RETURN_IF_ERROR(api_->WriteExecInput(who_, sandbox_, cat_->id(), eof));
  if (!cat_->WaitDone(600000)) return Status(Code::kUnavailable, "write file", path_, "timed out");
  const node::ExecOutcome o = cat_->outcome();
  if (o.exit_code == 0) return Status::Ok();
  std::string err = SanitizeUtf8(cat_->RawOutput(2).substr(0, 2000));
  if (!o.error.empty()) err = o.error;
  const int errnum = err.find("No space left") != std::string::npos ? ENOSPC : 0;
  return Status(Code::kInvalid, "write file", path_, "writing failed: " + err, errnum);
}

struct GzipInflater::Impl {
  z_stream z{};
  bool ended = false;
};

GzipInflater::GzipInflater() : impl_(std::make_unique<Impl>()) {
  // 15 + 16: a gzip header and trailer around the deflate stream.
  inflateInit2(&impl_->z, 15 + 16);
}

GzipInflater::~GzipInflater() { inflateEnd(&impl_->z); }

Status GzipInflater::Inflate(std::string_view in, std::string* out) {
  z_stream& z = impl_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[64 << 10];
  // Until the input is used and zlib has no more output for it (it may hold some back when
  // the buffer fills), or the stream ended.
  while (!impl_->ended) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      return Invalid("the upload is not valid gzip");
    out->append(buf, sizeof(buf) - z.avail_out);
    if (rc == Z_STREAM_END) impl_->ended = true;
    if (rc == Z_BUF_ERROR || (z.avail_in == 0 && z.avail_out != 0)) break;
  }
  return Status::Ok();
}

Status GzipInflater::Finish() const {
  if (!impl_->ended) return Invalid("the gzip upload ends early");
  return Status::Ok();
}

}  // namespace warren::server::e2b
