// A net namespace's probe for a pool of them (agent/call_ns_pool.h): the files of
// netns_pristine.h, opened inside the namespace once and read from outside at every check.
#pragma once

#include <utility>

#include "isolation/netns_pristine.h"

namespace warren::isolation {

class NetnsProbe {
 public:
  NetnsProbe() { Reset(); }
  NetnsProbe(NetnsProbe&& o) noexcept : files_(o.files_) { o.Reset(); }
  NetnsProbe& operator=(NetnsProbe&& o) noexcept {
    if (this != &o) {
      warren_netns_probe_close(&files_);
      files_ = o.files_;
      o.Reset();
    }
    return *this;
  }
  NetnsProbe(const NetnsProbe&) = delete;
  NetnsProbe& operator=(const NetnsProbe&) = delete;
  ~NetnsProbe() { warren_netns_probe_close(&files_); }

  // In the namespace (the calling thread's).
  bool Open() { return warren_netns_probe_open("/proc/thread-self/net", &files_) == 0; }
  bool Pristine() const { return warren_netns_probe_pristine(&files_) == 1; }

 private:
  void Reset() {
    for (int& fd : files_.fd) fd = -1;
  }
  warren_netns_probe files_;
};

}  // namespace warren::isolation
