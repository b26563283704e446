#include "server/e2b/multipart.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "base/unique_fd.h"

namespace warren::server::e2b {
namespace {

constexpr const char* kOp = "read multipart upload";
constexpr size_t kChunkBytes = 1 << 20;
constexpr size_t kMaxBoundaryBytes = 70;  // RFC 2046 §5.1.1
// How far past a delimiter its CRLF may be (transport padding: spaces and tabs).
constexpr size_t kMaxDelimiterTail = 1024;

Status Malformed(std::string what) { return Status(Code::kInvalid, kOp, "", std::move(what)); }

std::string PartName(size_t index) { return "part " + std::to_string(index); }

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// ASCII only: header and parameter names are ASCII, and the locale must not matter.
std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// RFC 2046's bchars: what a boundary may be made of (so it can never hold a CRLF or a quote).
bool IsBoundaryChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
}

Status CheckBoundary(std::string_view b) {
  if (b.empty() || b.size() > kMaxBoundaryBytes)
    return Malformed("the boundary must be 1 to 70 characters");
  if (!std::all_of(b.begin(), b.end(), IsBoundaryChar) || b.back() == ' ')
    return Malformed("the boundary has characters RFC 2046 does not allow");
  return Status::Ok();
}

using Params = std::vector<std::pair<std::string, std::string>>;

// The `; name=value` parameters of a header value after its first ';', names lower-cased and
// quotes removed. No backslash escapes: browsers and undici percent-escape a quote instead,
// and a backslash in a filename is the filename's. False on an unterminated quote.
bool ParseParams(std::string_view s, Params* out) {
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ';' || IsSpace(s[i])) {
      ++i;
      continue;
    }
    const size_t eq = s.find_first_of("=;", i);
    if (eq == std::string_view::npos || s[eq] == ';') {  // a parameter without a value
      i = eq == std::string_view::npos ? s.size() : eq;
      continue;
    }
    std::string name = Lower(Trim(s.substr(i, eq - i)));
    i = eq + 1;
    while (i < s.size() && IsSpace(s[i])) ++i;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      const size_t close = s.find('"', i + 1);
      if (close == std::string_view::npos) return false;
      value = s.substr(i + 1, close - i - 1);
      i = close + 1;
    } else {
      const size_t end = std::min(s.find(';', i), s.size());
      value = Trim(s.substr(i, end - i));
      i = end;
    }
    out->emplace_back(std::move(name), std::move(value));
  }
  return true;
}

// Undoes the HTML form encoding of names and filenames: %22, %0D and %0A (either case of hex),
// in one pass, so "%2522" stays "%2522".
std::string DecodeFormEscapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const std::string hex = Lower(s.substr(i + 1, 2));
      const char c = hex == "22" ? '"' : hex == "0d" ? '\r' : hex == "0a" ? '\n' : '\0';
      if (c != '\0') {
        out += c;
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// A sliding view of the file: bytes from absolute offset start_ on, read a chunk at a time.
// Callers only move forward, and what they have passed is forgotten, so memory stays at about
// a chunk plus what a caller asked to see at once.
class FileWindow {
 public:
  FileWindow(int fd, size_t chunk) : fd_(fd), chunk_(std::max<size_t>(chunk, 1)) {}

  // Up to `n` bytes from `pos` on (fewer only at the end of the file). Valid until the next
  // call.
  Result<std::string_view> Peek(uint64_t pos, size_t n) {
    WARREN_RETURN_IF_ERROR(Forget(pos));
    while (Data().size() < n && WARREN_TRY(ReadChunk())) {
    }
    return Data().substr(0, n);
  }

  // Where the first `needle` at or after `pos` begins; nullopt when the file ends first.
  Result<std::optional<uint64_t>> Find(uint64_t pos, std::string_view needle) {
    WARREN_RETURN_IF_ERROR(Forget(pos));
    for (;;) {
      const std::string_view data = Data();
      const size_t i = data.find(needle);
      if (i != std::string_view::npos) return std::optional<uint64_t>(start_ + i);
      // Keep the tail that may be the start of a needle the next chunk completes.
      if (data.size() >= needle.size())
        WARREN_RETURN_IF_ERROR(Forget(start_ + data.size() - needle.size() + 1));
      if (!WARREN_TRY(ReadChunk())) return std::optional<uint64_t>();
    }
  }

 private:
  std::string_view Data() const { return std::string_view(buf_).substr(head_); }

  Status Forget(uint64_t pos) {
    if (pos < start_) return Internal(kOp, "", "the scan moved backwards");
    const uint64_t drop = std::min<uint64_t>(pos - start_, buf_.size() - head_);
    head_ += drop;
    start_ = pos;  // past the buffered bytes only when they are all dropped: reads go on there
    return Status::Ok();
  }

  // Appends the next chunk; false at the end of the file. Forgotten bytes are compacted away
  // here, once per chunk, not on every Forget (a body of many small parts would move the
  // buffer for each).
  Result<bool> ReadChunk() {
    if (eof_) return false;
    buf_.erase(0, head_);
    head_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + chunk_);
    size_t got = 0;
    while (got < chunk_) {
      const ssize_t n =
          pread(fd_, buf_.data() + old + got, chunk_ - got, static_cast<off_t>(start_ + old + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        buf_.resize(old);
        return ErrnoStatus(kOp, "", err);
      }
      if (n == 0) {
        eof_ = true;
        break;
      }
      got += static_cast<size_t>(n);
    }
    buf_.resize(old + got);
    return got > 0;
  }

  int fd_;
  size_t chunk_;
  std::string buf_;
  size_t head_ = 0;     // buf_[head_] is the byte at start_
  uint64_t start_ = 0;  // absolute offset of the first byte not forgotten
  bool eof_ = false;
};

// Where the first delimiter ends. It may open the body ("--b") or follow a preamble
// ("...\r\n--b").
Result<uint64_t> OpeningDelimiter(FileWindow& w, std::string_view dash_boundary) {
  if (WARREN_TRY(w.Peek(0, dash_boundary.size())) == dash_boundary) return dash_boundary.size();
  const std::string delimiter = "\r\n" + std::string(dash_boundary);
  const std::optional<uint64_t> at = WARREN_TRY(w.Find(0, delimiter));
  if (!at) return Malformed("no opening boundary");
  return *at + delimiter.size();
}

// What follows a delimiter at `pos`: "--" closes the body (nullopt); otherwise optional
// padding and CRLF, and the next part begins after them.
Result<std::optional<uint64_t>> AfterDelimiter(FileWindow& w, uint64_t pos) {
  const std::string_view tail = WARREN_TRY(w.Peek(pos, kMaxDelimiterTail));
  if (tail.starts_with("--")) return std::optional<uint64_t>();
  const size_t pad = std::min(tail.find_first_not_of(" \t"), tail.size());
  const std::string_view rest = tail.substr(pad);
  if (rest.starts_with("\r\n")) return std::optional<uint64_t>(pos + pad + 2);
  const bool at_eof = tail.size() < kMaxDelimiterTail;
  if (at_eof && (rest.empty() || rest == "\r" || tail == "-"))
    return Malformed("the body ends without its closing boundary");
  return Malformed("a boundary line has more after the boundary");
}

// Fills `part` from one header line ("Name: value", folded lines already joined).
Status ApplyHeader(std::string_view line, size_t index, MultipartPart* part) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0)
    return Malformed(PartName(index) + " has a malformed header line");
  const std::string name = Lower(Trim(line.substr(0, colon)));
  const std::string_view value = Trim(line.substr(colon + 1));
  if (name == "content-type") {
    // RFC 7578 §4.3 dropped multipart/mixed for several files; nothing sends it now, and a
    // part's own parts would be invisible to the caller.
    if (Lower(value).starts_with("multipart/"))
      return Malformed(PartName(index) + " is a nested multipart part");
    part->content_type = value;
  } else if (name == "content-disposition") {
    Params params;
    const size_t semi = value.find(';');
    if (semi != std::string_view::npos && !ParseParams(value.substr(semi + 1), &params))
      return Malformed(PartName(index) + " has an unterminated quote in Content-Disposition");
    for (const auto& [key, v] : params) {
      if (key == "name") part->name = DecodeFormEscapes(v);
      if (key == "filename") part->filename = DecodeFormEscapes(v);
    }
  }
  return Status::Ok();
}

// Splits a header block into lines, joins folded ones (a line starting with a space or tab
// continues the one before) and applies each.
Status ApplyHeaders(std::string_view block, size_t index, MultipartPart* part) {
  std::vector<std::string> lines;
  while (!block.empty()) {
    const size_t end = std::min(block.find("\r\n"), block.size());
    const std::string_view line = block.substr(0, end);
    if (!lines.empty() && !line.empty() && IsSpace(line.front()))
      lines.back() += " " + std::string(Trim(line));
    else
      lines.emplace_back(line);
    block.remove_prefix(std::min(end + 2, block.size()));
  }
  for (const auto& line : lines) WARREN_RETURN_IF_ERROR(ApplyHeader(line, index, part));
  return Status::Ok();
}

// Reads the headers of part `index` at `pos` into `part`; where its content begins.
Result<uint64_t> ReadHeaders(FileWindow& w, uint64_t pos, size_t index, MultipartPart* part) {
  const std::string_view head = WARREN_TRY(w.Peek(pos, kMultipartMaxHeaderBytes));
  if (head.starts_with("\r\n")) return pos + 2;  // no headers at all
  const size_t end = head.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (head.size() < kMultipartMaxHeaderBytes)
      return Malformed(PartName(index) + " has no terminating boundary");
    return Malformed(PartName(index) + " has headers over 16 KiB");
  }
  // Copied: the window's view ends with the next read.
  WARREN_RETURN_IF_ERROR(ApplyHeaders(std::string(head.substr(0, end)), index, part));
  return pos + end + 4;
}

Result<std::vector<MultipartPart>> Scan(int fd, std::string_view boundary, size_t chunk) {
  WARREN_RETURN_IF_ERROR(CheckBoundary(boundary));
  FileWindow w(fd, chunk);
  const std::string dash_boundary = "--" + std::string(boundary);
  // Content ends at CRLF "--" boundary: the CRLF belongs to the delimiter, not the content.
  const std::string delimiter = "\r\n" + dash_boundary;
  uint64_t pos = WARREN_TRY(OpeningDelimiter(w, dash_boundary));
  std::vector<MultipartPart> parts;
  for (;;) {
    const std::optional<uint64_t> next = WARREN_TRY(AfterDelimiter(w, pos));
    if (!next) return parts;
    if (parts.size() == kMultipartMaxParts) return Malformed("more than 10000 parts");
    const size_t index = parts.size() + 1;
    MultipartPart part;
    part.offset = WARREN_TRY(ReadHeaders(w, *next, index, &part));
    const std::optional<uint64_t> end = WARREN_TRY(w.Find(part.offset, delimiter));
    if (!end) return Malformed(PartName(index) + " has no terminating boundary");
    part.size = *end - part.offset;
    pos = *end + delimiter.size();
    parts.push_back(std::move(part));
  }
}

}  // namespace

Result<std::string> MultipartBoundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (Lower(Trim(content_type.substr(0, semi))) != "multipart/form-data")
    return Malformed("the Content-Type is not multipart/form-data");
  Params params;
  if (semi != std::string_view::npos && !ParseParams(content_type.substr(semi + 1), &params))
    return Malformed("the Content-Type has an unterminated quote");
  for (auto& [name, value] : params) {
    if (name != "boundary") continue;
    WARREN_RETURN_IF_ERROR(CheckBoundary(value));
    return std::move(value);
  }
  return Malformed("the Content-Type has no boundary");
}

MultipartStream::MultipartStream(std::string_view boundary)
    : delimiter_("\r\n--" + std::string(boundary)) {}

Status MultipartStream::Feed(std::string_view bytes, Handler* handler) {
  pending_.append(bytes);
  for (;;) {
    switch (state_) {
      case State::kPreamble: {
        const size_t at = pending_.find(delimiter_);
        if (at == std::string::npos) {
          // Keep what could still be the start of the delimiter.
          if (pending_.size() >= delimiter_.size())
            pending_.erase(0, pending_.size() - (delimiter_.size() - 1));
          return Status::Ok();
        }
        pending_.erase(0, at + delimiter_.size());
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kAfterDelimiter: {
        if (pending_.size() < 2) return Status::Ok();
        if (pending_.starts_with("--")) {
          state_ = State::kEpilogue;
          break;
        }
        const size_t pad = std::min(pending_.find_first_not_of(" \t"), pending_.size());
        const std::string_view rest = std::string_view(pending_).substr(pad);
        if (rest.size() < 2) {
          if (pending_.size() > kMaxDelimiterTail)
            return Malformed("a boundary line has more after the boundary");
          return Status::Ok();
        }
        if (!rest.starts_with("\r\n"))
          return Malformed("a boundary line has more after the boundary");
        if (parts_ == kMultipartMaxParts) return Malformed("more than 10000 parts");
        ++parts_;
        pending_.erase(0, pad + 2);
        state_ = State::kHeaders;
        break;
      }
      case State::kHeaders: {
        MultipartPart part;
        size_t content = 0;
        if (pending_.starts_with("\r\n")) {
          content = 2;  // no headers at all
        } else {
          const size_t end = pending_.find("\r\n\r\n");
          if (end == std::string::npos) {
            if (pending_.size() >= kMultipartMaxHeaderBytes)
              return Malformed(PartName(parts_) + " has headers over 16 KiB");
            return Status::Ok();
          }
          if (end + 4 > kMultipartMaxHeaderBytes)
            return Malformed(PartName(parts_) + " has headers over 16 KiB");
          WARREN_RETURN_IF_ERROR(ApplyHeaders(pending_.substr(0, end), parts_, &part));
          content = end + 4;
        }
        if (pending_.size() < content) return Status::Ok();
        pending_.erase(0, content);
        WARREN_RETURN_IF_ERROR(handler->BeginPart(part));
        state_ = State::kBody;
        break;
      }
      case State::kBody: {
        const size_t at = pending_.find(delimiter_);
        if (at == std::string::npos) {
          // All but a possible start of the delimiter is the part's.
          if (pending_.size() >= delimiter_.size()) {
            const size_t n = pending_.size() - (delimiter_.size() - 1);
            WARREN_RETURN_IF_ERROR(handler->PartData(std::string_view(pending_).substr(0, n)));
            pending_.erase(0, n);
          }
          return Status::Ok();
        }
        if (at > 0)
          WARREN_RETURN_IF_ERROR(handler->PartData(std::string_view(pending_).substr(0, at)));
        WARREN_RETURN_IF_ERROR(handler->EndPart());
        pending_.erase(0, at + delimiter_.size());
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kEpilogue:
        pending_.clear();
        return Status::Ok();
    }
  }
}

Status MultipartStream::Finish() {
  switch (state_) {
    case State::kEpilogue:
      return Status::Ok();
    case State::kPreamble:
      return Malformed("no opening boundary");
    case State::kHeaders:
    case State::kBody:
      return Malformed(PartName(parts_) + " has no terminating boundary");
    case State::kAfterDelimiter:
      break;
  }
  return Malformed("the body ends without its closing boundary");
}

Result<std::vector<MultipartPart>> ScanMultipartFile(const std::string& path,
                                                     std::string_view boundary) {
  return detail::ScanMultipartFileForTest(path, boundary, kChunkBytes);
}

namespace detail {

Result<std::vector<MultipartPart>> ScanMultipartFileForTest(const std::string& path,
                                                            std::string_view boundary,
                                                            size_t chunk_bytes) {
  // The path is the server's own spool file: errors must not show it to the client.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(kOp, "");
  return Scan(fd.get(), boundary, chunk_bytes);
}

}  // namespace detail

}  // namespace warren::server::e2b
