#include "net/mirror_peers.h"

#include <cstdint>

namespace warren::net {
namespace {

// FNV-1a over both strings, then a 64-bit finaliser (splitmix64's) so that names differing in
// one character spread over the whole range. The same on every node: no per-process seed.
uint64_t Score(const std::string& name, const std::string& key) {
  uint64_t h = 14695981039346656037ull;
  auto feed = [&h](const std::string& s) {
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 1099511628211ull;
    }
  };
  feed(name);
  h ^= 0xff;  // a separator no name holds: ("ab","c") and ("a","bc") differ
  h *= 1099511628211ull;
  feed(key);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

size_t RendezvousOwner(const std::string& key, const std::vector<std::string>& names) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const uint64_t s = Score(names[i], key);
    if (i == 0 || s > best_score || (s == best_score && names[i] < names[best])) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

}  // namespace warren::net
