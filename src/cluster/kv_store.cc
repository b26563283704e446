#include "cluster/kv_store.h"

namespace warren::cluster {

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  // The smallest key greater than every key with this prefix: the last byte that is not 0xff,
  // plus one, with what follows dropped. All 0xff (or empty): "\0", etcd's "to the end".
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Result<KeyValue> KvStore::Get(const std::string& key) {
  auto r = Range({.key = key});
  if (!r.ok()) return r.status();
  if (r->kvs.empty()) return NotFound("key", key);
  return std::move(r->kvs.front());
}

Result<RangeResult> KvStore::List(const std::string& prefix) {
  return Range({.key = prefix, .range_end = PrefixEnd(prefix)});
}

}  // namespace warren::cluster
