// A native worker's request as the dispatcher writes it on the worker's fd 3 (call_worker.h),
// in a form pid 1 takes apart in place, without allocating: pid 1 runs in the native forker's
// memory (native_forker.h), whose heap is the forker's own.
//
// Wire: a NativeRequestHead; `strings_len` bytes of NUL-terminated strings, in order the cwd,
// `argc` argv, `envc` environment entries ("K=V"), `nfiles` file names, `ncollect` names to
// bring back; `nfiles` NativeRequestFile; the files' bytes in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "isolation/call_limits.h"

namespace warren::agent {

inline constexpr uint32_t kNativeRequestMagic = 0x3152'6e57;  // "WnR1"
// Bounds pid 1 holds a request to: its strings must fit the room it has for them, and each
// string needs a pointer.
inline constexpr uint32_t kNativeRequestMaxStrings = 4u << 20;
inline constexpr uint32_t kNativeRequestMaxItems = 65536;

struct NativeRequestHead {
  uint32_t magic = kNativeRequestMagic;
  uint32_t argc = 0, envc = 0, nfiles = 0, ncollect = 0;
  uint32_t strings_len = 0;
  warren_call_limits limits{};  // each 0 for none
};

struct NativeRequestFile {
  uint64_t len = 0;
  uint32_t mode = 0644;
  uint32_t reserved = 0;
};

// `req`: the run's request (argv, env {K: V}, files [{name, len, mode}], limits {cpu_s,
// as_bytes, stack_bytes, fsize_bytes, nproc, nofile}, collect [names], cwd), `files_data` the
// files' bytes in order (a file whose `len` runs past them is cut short). Fields of another
// type count as absent; a string with a NUL in it is cut there.
std::string EncodeNativeRequest(const nlohmann::json& req, std::string_view files_data);

// Pid 1's side: `strings` (the head's strings_len bytes) split in place. `ptrs` must have room
// for argc + envc + nfiles + ncollect + 3 pointers (argv and envp come null-terminated, and
// argv has one free slot before it, for /bin/sh when a script has no #! line). Returns null, or
// what is wrong with the request.
struct NativeRequestView {
  const char* cwd = nullptr;
  char** argv = nullptr;  // argv[-1] is free
  char** envp = nullptr;
  char** file_names = nullptr;
  char** collect = nullptr;
};
const char* SplitNativeRequest(const NativeRequestHead& head, char* strings, char** ptrs,
                               size_t nptrs, NativeRequestView* view);
inline size_t NativeRequestPointers(const NativeRequestHead& h) {
  return size_t{h.argc} + h.envc + h.nfiles + h.ncollect + 3;
}

}  // namespace warren::agent
