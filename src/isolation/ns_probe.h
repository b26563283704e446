// A namespace's probe for a pool of them (agent/call_ns_pool.h): what tells, read from outside,
// whether a namespace is still as new. Its files are opened inside the namespace once, each
// staying bound to it, and read at every check: netns_pristine.h's for a net namespace,
// ipcns_pristine.h's for an IPC one. An owner of those C structs' fds.
#pragma once

#include "isolation/ipcns_pristine.h"
#include "isolation/netns_pristine.h"

namespace warren::isolation {

// `Files`: the C probe; `kEmpty` sets it to hold nothing; `kOpen` runs in the namespace (the
// calling thread's) and returns 0 with every file open, else -1 with none.
template <class Files, void (*kEmpty)(Files*), int (*kOpen)(Files*), int (*kPristine)(const Files*),
          void (*kClose)(Files*)>
class NsProbe {
 public:
  NsProbe() { kEmpty(&files_); }
  NsProbe(NsProbe&& o) noexcept : files_(o.files_) { kEmpty(&o.files_); }
  NsProbe& operator=(NsProbe&& o) noexcept {
    if (this != &o) {
      kClose(&files_);
      files_ = o.files_;
      kEmpty(&o.files_);
    }
    return *this;
  }
  NsProbe(const NsProbe&) = delete;
  NsProbe& operator=(const NsProbe&) = delete;
  ~NsProbe() { kClose(&files_); }

  bool Open() { return kOpen(&files_) == 0; }
  bool Pristine() const { return kPristine(&files_) == 1; }

 private:
  Files files_;
};

namespace ns_probe_detail {
inline void EmptyNet(warren_netns_probe* p) {
  for (int& fd : p->fd) fd = -1;
}
inline int OpenNetHere(warren_netns_probe* p) {
  return warren_netns_probe_open("/proc/thread-self/net", p);
}
inline void EmptyIpc(warren_ipcns_probe* p) {
  for (int& fd : p->next_id) fd = -1;
  p->mqueue = -1;
  p->empty_size = 0;
}
}  // namespace ns_probe_detail

using NetnsProbe =
    NsProbe<warren_netns_probe, ns_probe_detail::EmptyNet, ns_probe_detail::OpenNetHere,
            warren_netns_probe_pristine, warren_netns_probe_close>;
using IpcnsProbe = NsProbe<warren_ipcns_probe, ns_probe_detail::EmptyIpc, warren_ipcns_probe_open,
                           warren_ipcns_probe_pristine, warren_ipcns_probe_close>;

}  // namespace warren::isolation
