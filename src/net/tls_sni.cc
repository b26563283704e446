#include "net/tls_sni.h"

#include <cstdint>

namespace warren::net {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view d) : d_(d) {}
  bool U8(uint32_t* v) { return N(1, v); }
  bool U16(uint32_t* v) { return N(2, v); }
  bool U24(uint32_t* v) { return N(3, v); }
  bool Skip(size_t n) {
    if (d_.size() < n) return false;
    d_.remove_prefix(n);
    return true;
  }
  bool Take(size_t n, std::string_view* out) {
    if (d_.size() < n) return false;
    *out = d_.substr(0, n);
    d_.remove_prefix(n);
    return true;
  }

 private:
  bool N(size_t n, uint32_t* v) {
    if (d_.size() < n) return false;
    *v = 0;
    for (size_t i = 0; i < n; ++i) *v = (*v << 8) | static_cast<uint8_t>(d_[i]);
    d_.remove_prefix(n);
    return true;
  }
  std::string_view d_;
};

}  // namespace

SniResult ParseSni(std::string_view data, std::string* name) {
  // Record header: handshake (22), version 3.x, length.
  if (data.empty()) return SniResult::kNeedMore;
  if (static_cast<uint8_t>(data[0]) != 22) return SniResult::kNotTls;
  if (data.size() < 5) return SniResult::kNeedMore;
  if (static_cast<uint8_t>(data[1]) != 3) return SniResult::kNotTls;
  const size_t rec_len = (static_cast<uint8_t>(data[3]) << 8) | static_cast<uint8_t>(data[4]);
  if (rec_len > 16384 + 2048) return SniResult::kNotTls;
  if (data.size() < 5 + rec_len) return SniResult::kNeedMore;
  Reader r(data.substr(5, rec_len));
  uint32_t type, len, v;
  if (!r.U8(&type) || type != 1 || !r.U24(&len)) return SniResult::kNotTls;  // ClientHello
  // A ClientHello longer than its first record: SNI comes early, so read what we have.
  if (!r.Skip(2 + 32)) return SniResult::kNoSni;           // version, random
  if (!r.U8(&v) || !r.Skip(v)) return SniResult::kNoSni;   // session id
  if (!r.U16(&v) || !r.Skip(v)) return SniResult::kNoSni;  // cipher suites
  if (!r.U8(&v) || !r.Skip(v)) return SniResult::kNoSni;   // compression
  uint32_t ext_total;
  if (!r.U16(&ext_total)) return SniResult::kNoSni;
  std::string_view exts;
  if (!r.Take(ext_total, &exts)) return SniResult::kNoSni;
  Reader e(exts);
  uint32_t ext_type, ext_len;
  while (e.U16(&ext_type) && e.U16(&ext_len)) {
    std::string_view body;
    if (!e.Take(ext_len, &body)) return SniResult::kNoSni;
    if (ext_type != 0) continue;  // server_name
    Reader s(body);
    uint32_t list_len, name_type, name_len;
    std::string_view host;
    if (!s.U16(&list_len) || !s.U8(&name_type) || name_type != 0 || !s.U16(&name_len) ||
        !s.Take(name_len, &host))
      return SniResult::kNoSni;
    *name = std::string(host);
    return SniResult::kFound;
  }
  return SniResult::kNoSni;
}

}  // namespace warren::net
