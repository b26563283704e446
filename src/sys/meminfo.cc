#include "sys/meminfo.h"

#include <fstream>
#include <string>

namespace warren::sys {

uint64_t MeminfoBytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t kib = 0;
  while (in >> name >> kib) {
    if (name.size() == key.size() + 1 && name.back() == ':' &&
        name.compare(0, key.size(), key) == 0)
      return kib << 10;
    in.ignore(64, '\n');
  }
  return 0;
}

}  // namespace warren::sys
