// SandboxFileWriter: one file written into a sandbox as its bytes arrive (an upload streamed
// through the front end). Up to 8 MiB is kept and written in one message when that is all;
// beyond, a `cat` in the sandbox takes the bytes in pieces of one agent message at the pace
// it writes them, into a file beside the target that replaces it only once whole (a failed
// upload leaves the old file as it was).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "node/exec_record.h"
#include "server/auth.h"
#include "server/routes.h"

namespace warren::server::e2b {

// One agent message at most (agent/protocol.h's kMaxPayload is 60 KiB): the agent takes or
// refuses a piece whole, so a refused one can simply be sent again.
inline constexpr size_t kInputPieceBytes = 56 << 10;

// Writes `data` to the stdin of running command `rec` in pieces of one agent message, each
// taken or refused whole, so that input the command is slow to read is delivered once: a
// refused piece waits 2 ms and goes again, up to `max_attempts` times. Empty `data` still
// makes one (empty) write.
Status SendInputInPieces(Api* api, const Principal& who, const std::string& sandbox,
                         const node::ExecRecord& rec, std::string_view data, int max_attempts);

class SandboxFileWriter {
 public:
  static constexpr size_t kWholeWriteBytes = 8 << 20;

  SandboxFileWriter(Api* api, const Principal& who, std::string sandbox, std::string path);
  // Kills the `cat` if the file was not closed (its partial file goes with it).
  ~SandboxFileWriter();
  SandboxFileWriter(const SandboxFileWriter&) = delete;
  SandboxFileWriter& operator=(const SandboxFileWriter&) = delete;

  Status Write(std::string_view data);
  // The file is whole: written (or moved into place).
  Status Close();
  const std::string& path() const { return path_; }

 private:
  Status StartStreaming();
  Status Send(std::string_view data);

  Api* api_;
  const Principal& who_;
  const std::string sandbox_, path_;
  std::string held_;  // before streaming starts
  std::shared_ptr<node::ExecRecord> cat_;
  bool closed_ = false;
};

// Inflates a gzip stream piece by piece (Content-Encoding: gzip uploads).
class GzipInflater {
 public:
  GzipInflater();
  ~GzipInflater();
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;
  // The bytes `in` inflates to (appended to `out`); kInvalid for what is not gzip.
  Status Inflate(std::string_view in, std::string* out);
  // The stream ended: an error unless gzip's trailer came.
  Status Finish() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace warren::server::e2b
