// An IPC namespace's probe for a pool of them (agent/call_ns_pool.h): ipcns_pristine.h's
// files, opened inside the namespace once and read from outside at every check.
#pragma once

#include "isolation/ipcns_pristine.h"

namespace warren::isolation {

class IpcnsProbe {
 public:
  IpcnsProbe() { Reset(); }
  IpcnsProbe(IpcnsProbe&& o) noexcept : files_(o.files_) { o.Reset(); }
  IpcnsProbe& operator=(IpcnsProbe&& o) noexcept {
    if (this != &o) {
      warren_ipcns_probe_close(&files_);
      files_ = o.files_;
      o.Reset();
    }
    return *this;
  }
  IpcnsProbe(const IpcnsProbe&) = delete;
  IpcnsProbe& operator=(const IpcnsProbe&) = delete;
  ~IpcnsProbe() { warren_ipcns_probe_close(&files_); }

  // In the namespace (the calling thread's).
  bool Open() { return warren_ipcns_probe_open(&files_) == 0; }
  bool Pristine() const { return warren_ipcns_probe_pristine(&files_) == 1; }

 private:
  void Reset() {
    for (int& fd : files_.next_id) fd = -1;
    files_.mqueue = -1;
    files_.empty_size = 0;
  }
  warren_ipcns_probe files_;
};

}  // namespace warren::isolation
