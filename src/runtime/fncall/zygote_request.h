/* What a Python worker is sent on its request pipe (fd 3), in two parts:
 *
 *   u32 head_len | head (struct wz_request_head, then the cwd, then nfiles entries of
 *                  struct wz_request_file each followed by its name) |
 *   the files' bytes, one after the other |
 *   u32 dict_len | a marshal'd dict {mode, code, args, filename[, env]} (agent/py_marshal.h)
 *
 * The first part is applied before any Python runs in the worker (zygote_lib.c: the files
 * written into /tmp, the cwd, the rlimits), the second is what only Python needs. Why: every
 * page a forked interpreter writes is a copy (a fault of ~20 us on a PVM guest), and these
 * steps took ~70 of a worker's ~245 faults in Python. zygote.py applies the first part in
 * Python where warren-zygote.so cannot load. Written by the dispatcher (call_dispatcher.cc,
 * agent/python_request.h); all integers little-endian (the host's: both ends run on it).
 * Plain C: included by the C zygote library and by C++. */
#ifndef WARREN_RUNTIME_FNCALL_ZYGOTE_REQUEST_H_
#define WARREN_RUNTIME_FNCALL_ZYGOTE_REQUEST_H_

#include <stdint.h>

#include "isolation/call_limits.h"

#define WZ_REQUEST_VERSION 1u
/* The first part is small (a cwd, file names): a head larger than this is refused. */
#define WZ_REQUEST_HEAD_MAX (1u << 20)

/* Each limit 0 when not set (python3's own then), as RunLimits in node/fncall/runner.h. */
struct wz_request_head {
  uint32_t version;
  uint32_t nfiles;
  uint32_t cwd_len; /* 0: /tmp, where the set-up left the worker */
  uint32_t reserved;
  /* As isolation/call_limits.h, but as_bytes is on top of the address space the worker
   * already has. */
  struct warren_call_limits limits;
};

struct wz_request_file {
  uint32_t name_len; /* the name follows; written at /tmp/NAME */
  uint32_t mode;
  uint64_t len; /* its bytes, after the whole head */
};

#endif /* WARREN_RUNTIME_FNCALL_ZYGOTE_REQUEST_H_ */
