#include "blobfs/prefetch_pack.h"

#include "base/sha256.h"

namespace warren::blobfs {
namespace {

constexpr size_t kDigestBytes = 32;
constexpr size_t kRecordHead = kPackRecordHead;

}  // namespace

std::string PackStart() { return std::string(kPackMagic); }

void AppendPackRecord(std::string* pack, const std::string& sha256_hex, std::string_view bytes) {
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) pack->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  pack->append(Sha256RawOf(sha256_hex));
  pack->append(bytes);
}

PackReader::PackReader(uint64_t max_chunk, OnChunk on_chunk)
    : max_chunk_(max_chunk), on_chunk_(std::move(on_chunk)) {}

bool PackReader::Fail(std::string why) {
  ok_ = false;
  error_ = std::move(why);
  return false;
}

bool PackReader::Feed(std::string_view piece) {
  if (!ok_) return false;
  buf_.append(piece);
  size_t at = 0;
  if (!magic_seen_) {
    if (buf_.size() < kPackMagic.size()) {
      if (kPackMagic.substr(0, buf_.size()) != buf_) return Fail("not a prefetch pack");
      return true;
    }
    if (std::string_view(buf_).substr(0, kPackMagic.size()) != kPackMagic)
      return Fail("not a prefetch pack");
    magic_seen_ = true;
    at = kPackMagic.size();
  }
  // Every whole record in the buffer; the tail waits for the next piece.
  while (buf_.size() - at >= kRecordHead) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<unsigned char>(buf_[at + i])) << (8 * i);
    if (n == 0 || n > max_chunk_)
      return Fail("a record of " + std::to_string(n) + " bytes (chunks are at most " +
                  std::to_string(max_chunk_) + ")");
    if (buf_.size() - at < kRecordHead + n) break;
    const std::string hex = Sha256HexOf(std::string_view(buf_).substr(at + 4, kDigestBytes));
    if (!on_chunk_(hex, std::string_view(buf_).substr(at + kRecordHead, n))) {
      ok_ = false;
      return false;
    }
    at += kRecordHead + n;
  }
  buf_.erase(0, at);
  return true;
}

}  // namespace warren::blobfs
