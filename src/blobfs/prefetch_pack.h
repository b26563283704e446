// A prefetch pack: the chunks a layer's trace names, concatenated in trace order, as one
// object beside the layer in the shared store (STORE/packs/sha256/<layer hex>). A cold node
// fetches it in one request and stream instead of one request per traced chunk (~120 for a
// cold `python3 -c 'print(1)'`), as eStargz's prioritized region and Nydus's prefetch table
// do. A pack is a transport, not a source of truth: every record names its chunk by digest,
// and the reader checks each against the layer's manifest and its sha256 before using it.
//
// Layout: the magic "WRNPACK1", then per chunk a record: u32 little-endian length, the
// chunk's raw sha256 (32 bytes), then its bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::blobfs {

inline constexpr std::string_view kPackMagic = "WRNPACK1";
// A record's bytes besides its chunk's: the length and the raw digest.
inline constexpr uint64_t kPackRecordHead = 4 + 32;

// Appends one chunk's record to `pack` (which starts with kPackMagic; PackStart gives that).
std::string PackStart();
void AppendPackRecord(std::string* pack, const std::string& sha256_hex, std::string_view bytes);

// Parses a pack as its bytes arrive, in pieces of any size, and hands each whole record to
// `on_chunk` (the chunk's hex digest and bytes, unverified). A record longer than
// `max_chunk` or a wrong magic is an error (the pack is malformed); `on_chunk` returning false
// stops the parse (Feed returns false from then on).
class PackReader {
 public:
  using OnChunk = std::function<bool(const std::string& hex, std::string_view bytes)>;
  PackReader(uint64_t max_chunk, OnChunk on_chunk);

  // False once the pack turned out malformed or `on_chunk` stopped it: read no further.
  bool Feed(std::string_view piece);
  // After the last piece: whether the pack ended on a record boundary.
  bool Complete() const { return ok_ && magic_seen_ && buf_.empty(); }
  // Why the parse stopped, if it did because the pack is malformed ("" otherwise).
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string why);

  const uint64_t max_chunk_;
  const OnChunk on_chunk_;
  std::string buf_;  // bytes of the record (or magic) not yet whole
  bool magic_seen_ = false;
  bool ok_ = true;
  std::string error_;
};

}  // namespace warren::blobfs
