// multipart/form-data (RFC 7578) for the E2B-compatible file upload. The body has already
// been streamed to a file (uploads may be GiBs), so the scanner reads it in fixed-size chunks
// and answers where each part's bytes lie rather than copying them: the caller moves the
// content straight from the file into the sandbox.
//
// Field names and filenames are decoded the way browsers and undici (Node's fetch) encode
// them: only %22, %0D and %0A, nothing else (a literal "%41" or backslash stays as it is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace warren::server::e2b {

// Limits against a body built to exhaust the server rather than to upload files.
inline constexpr size_t kMultipartMaxHeaderBytes = 16 * 1024;  // a part's headers + blank line
inline constexpr size_t kMultipartMaxParts = 10000;

// One part of a multipart/form-data body kept in a file: its headers and where its bytes lie.
struct MultipartPart {
  std::string name;          // Content-Disposition name=
  std::string filename;      // Content-Disposition filename= (undici percent-escapes ", CR, LF
                             // as %22 %0D %0A: decode those three only)
  std::string content_type;  // the part's Content-Type, "" if absent
  uint64_t offset = 0;       // first byte of the part's content in the file
  uint64_t size = 0;         // its length
};

// The boundary parameter of a Content-Type header value ("multipart/form-data; boundary=...",
// quoted or not, case-insensitive type and parameter names). An invalid Status otherwise,
// and for a boundary RFC 2046 does not allow (empty, over 70 characters, other characters).
Result<std::string> MultipartBoundary(std::string_view content_type);

// Scans the body stored in file `path` with `boundary`, reading it in 1 MiB chunks so a
// multi-GiB upload never sits in memory; the parts in order. A preamble before the first
// boundary and an epilogue after the closing one are ignored; lines end with CRLF. Errors
// are Code::kInvalid for the operation "read multipart upload" and never name `path`: no
// opening boundary, a part without a terminating boundary, headers over 16 KiB, more than
// 10000 parts, a nested multipart part.
Result<std::vector<MultipartPart>> ScanMultipartFile(const std::string& path,
                                                     std::string_view boundary);

// The same format read as it arrives: bytes in, parts out, holding only a delimiter's length
// of look-behind and one part's headers. Used for uploads streamed straight into a sandbox.
class MultipartStream {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A part begins (`offset` and `size` are not known and stay 0).
    virtual Status BeginPart(const MultipartPart& part) = 0;
    virtual Status PartData(std::string_view bytes) = 0;
    virtual Status EndPart() = 0;
  };
  // `boundary` as MultipartBoundary returns it.
  explicit MultipartStream(std::string_view boundary);
  // More of the body. Errors as ScanMultipartFile's; the handler's own are returned as they are.
  Status Feed(std::string_view bytes, Handler* handler);
  // The body ended: an error unless its closing delimiter came.
  Status Finish();
  size_t parts() const { return parts_; }

 private:
  enum class State { kPreamble, kAfterDelimiter, kHeaders, kBody, kEpilogue };
  State state_ = State::kPreamble;
  const std::string delimiter_;  // CRLF "--" boundary
  // Not yet consumed. Starts as CRLF, so that a body opening with "--boundary" has its first
  // delimiter found like every later one.
  std::string pending_ = "\r\n";
  size_t parts_ = 0;
};

namespace detail {
// ScanMultipartFile reading `chunk_bytes` at a time: small chunks put delimiters across
// chunk edges in tests.
Result<std::vector<MultipartPart>> ScanMultipartFileForTest(const std::string& path,
                                                            std::string_view boundary,
                                                            size_t chunk_bytes);
}  // namespace detail

}  // namespace warren::server::e2b
