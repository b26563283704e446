#include "agent/call_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "agent/call_artifacts.h"
#include "agent/exec_spawn.h"
#include "agent/native_request.h"
#include "isolation/call_limits.h"
#include "isolation/call_setup.h"
#include "sys/fd_io.h"

// Nothing here allocates or writes a global: see call_worker.h. The C library's system call
// wrappers are safe (errno is in pid 1's own thread block); its heap, stdio and locale are not.

namespace warren::agent {
namespace {

constexpr int kRequest = 3, kReport = 4;
constexpr size_t kChunk = 32 << 10;

// Text built in a buffer of fixed size; what does not fit is cut (and `full` says so). In the
// room, `mark` is told how far it was written (CallWorkerParams::room_used) before it is.
struct Text {
  char* buf;
  size_t cap, len = 0;
  bool full = false;
  volatile size_t* mark = nullptr;
  size_t base = 0;  // buf's offset in the room

  Text& Add(std::string_view s) {
    size_t n = s.size();
    if (len + n > cap) {
      full = true;
      n = cap - len;
    }
    if (mark && base + len + n > *mark) *mark = base + len + n;
    memcpy(buf + len, s.data(), n);
    len += n;
    return *this;
  }
  Text& Num(int64_t v) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do tmp[sizeof tmp - ++n] = static_cast<char>('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0) tmp[sizeof tmp - ++n] = '-';
    return Add(std::string_view(tmp + sizeof tmp - n, n));
  }
  // A JSON string, quoted.
  Text& Json(std::string_view s) {
    Add("\"");
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        const char esc[2] = {'\\', static_cast<char>(c)};
        Add(std::string_view(esc, 2));
      } else if (c < 0x20) {
        const char* hex = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        Add(std::string_view(esc, 6));
      } else {
        Add(std::string_view(reinterpret_cast<const char*>(&c), 1));
      }
    }
    return Add("\"");
  }
};

const char* ErrorText(int err) {
  const char* d = strerrordesc_np(err);  // untranslated: no locale, no allocation
  return d ? d : "unknown error";
}

// A frame (agent/protocol.h) whose header is `header`, followed by `payload_len` bytes that the
// caller writes next.
bool WriteFrameHead(std::string_view header, uint64_t payload_len) {
  const uint32_t hlen = static_cast<uint32_t>(header.size());
  const uint32_t total = static_cast<uint32_t>(4 + header.size() + payload_len);
  char lens[8];
  memcpy(lens, &total, 4);
  memcpy(lens + 4, &hlen, 4);
  return sys::WriteFull(kReport, std::string_view(lens, 8)) && sys::WriteFull(kReport, header);
}

[[noreturn]] void ReportError(std::string_view what, int err) {
  char buf[512];
  Text t{buf, sizeof buf};
  char msg[400];
  Text m{msg, sizeof msg};
  m.Add(what);
  if (err) m.Add(": ").Add(ErrorText(err));
  t.Add("{\"error\": ").Json(std::string_view(msg, m.len)).Add("}");
  WriteFrameHead(std::string_view(buf, t.len), 0);
  _exit(1);
}

[[noreturn]] void SetupFailed(const char* what) { CallWorkerSetupFailed(what, errno); }

}  // namespace

[[noreturn]] void CallWorkerSetupFailed(const char* what, int err) {
  char msg[256];
  Text m{msg, sizeof msg};
  m.Add("worker setup: ").Add(what);
  ReportError(std::string_view(msg, m.len), err);
}

namespace {

void OnUsr1(int) {
  // The dispatcher ends the call: every process of it but us (pid 1 of its namespace), so the
  // wait below returns and the usage is still reported.
  kill(-1, SIGKILL);
}

// Drops `n` bytes of the request (a file that could not be written).
bool Skip(uint64_t n, char* chunk) {
  while (n > 0) {
    const size_t k = n < kChunk ? static_cast<size_t>(n) : kChunk;
    if (!sys::ReadExact(kRequest, chunk, k)) return false;
    n -= k;
  }
  return true;
}

// Copies `n` bytes of the request into `fd`.
bool CopyIn(int fd, uint64_t n, char* chunk) {
  bool ok = true;
  while (n > 0) {
    const size_t k = n < kChunk ? static_cast<size_t>(n) : kChunk;
    if (!sys::ReadExact(kRequest, chunk, k)) return false;
    ok = ok && sys::WriteFull(fd, std::string_view(chunk, k));
    n -= k;
  }
  (void)ok;  // a file the call cannot write (its /tmp full) is the program's to find
  return true;
}

// The program's side of the spawn: it shares pid 1's memory (CLONE_VM | CLONE_VFORK), so it
// only undoes what pid 1 set for itself and execs; what failed is left in `exec_errno`. Its
// signal dispositions are pid 1's: SIGPIPE, SIGXFSZ and SIGCHLD at their defaults since pid 1
// began, SIGUSR1 caught, which the exec puts back to its default (a process-directed SIGUSR1
// goes to pid 1, never to this child).
struct ProgramSpawn {
  char** argv;
  char* const* envp;
  const char* path;
  int exec_errno = 0;
};

int ProgramMain(void* arg) {
  auto* p = static_cast<ProgramSpawn*>(arg);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ExecSearch(p->argv, p->envp, p->path);
  p->exec_errno = errno;
  _exit(errno == ENOENT ? 127 : 126);
}

// The report: the run's figures and the files it brought back, each file's bytes streamed
// after the header.
[[noreturn]] void ReportRun(int status, const Artifact* files, size_t nfiles, Text t, bool collect,
                            char* chunk) {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  const int64_t cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
                         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
  t.Add("{\"exit_code\": ").Num(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  t.Add(", \"signal\": ").Num(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  t.Add(", \"cpu_ms\": ").Num(cpu_ms).Add(", \"maxrss_kb\": ").Num(ru.ru_maxrss);
  uint64_t payload = 0;
  if (collect) {
    t.Add(", \"files\": [");
    for (size_t i = 0; i < nfiles; ++i) {
      t.Add(i ? ", " : "").Add("{\"name\": ").Json(files[i].name);
      t.Add(", \"len\": ").Num(static_cast<int64_t>(files[i].len));
      t.Add(", \"mode\": ").Num(files[i].mode).Add("}");
      payload += files[i].len;
    }
    t.Add("]");
  }
  t.Add("}");
  if (t.full) ReportError("the report does not fit", 0);
  if (!WriteFrameHead(std::string_view(t.buf, t.len), payload)) _exit(1);
  // Each file opened again as OpenArtifacts found it (one at a time: the call's RLIMIT_NOFILE is
  // ours too); one that changed or went meanwhile is sent as zeros, so the frame keeps its length.
  for (size_t i = 0; i < nfiles; ++i) {
    const int fd = ReopenArtifact(files[i]);
    uint64_t left = files[i].len;
    while (left > 0) {
      const size_t want = left < kChunk ? static_cast<size_t>(left) : kChunk;
      ssize_t r = fd >= 0 ? read(fd, chunk, want) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        memset(chunk, 0, want);
        r = static_cast<ssize_t>(want);
      }
      if (!sys::WriteFull(kReport, std::string_view(chunk, static_cast<size_t>(r)))) _exit(1);
      left -= static_cast<uint64_t>(r);
    }
    if (fd >= 0) close(fd);
  }
  _exit(0);
}

// Whether we are the last process of our pid namespace. Every other one descends from us
// (an orphan comes to us, or to a subreaper below us), so with no child of ours, ended or not,
// there is none; most programs leave none. `kill(-1)` is then not made: it walks every process
// on the host under the kernel's task-list lock, not only our namespace's.
bool NoneLeft() { return waitpid(-1, nullptr, WNOHANG | __WALL) < 0 && errno == ECHILD; }

}  // namespace

[[noreturn]] void RunCallWorker(const CallWorkerParams& params) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the forker gone (the runner going away): the call goes
  // The forker's dispositions are not the call's: the report must not outlive a closed pipe
  // silently, a child's end must be waitable, and SIGUSR1 waits (blocked since the clone) for
  // its handler.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGPIPE, SIGXFSZ, SIGCHLD}) sigaction(s, &dfl, nullptr);
  fcntl(kReport, F_SETFD, FD_CLOEXEC);  // the program never holds the report pipe
  // The recipe every call's worker follows, Python or native (isolation/call_setup.h).
  const warren_call_params setup{params.uid,        params.tmp_bytes,      params.setup_flags,
                                 params.root_flags, params.seccomp.data(), params.seccomp.size()};
  if (const char* failed = warren_call_setup(&setup)) SetupFailed(failed);
  prctl(PR_SET_DUMPABLE, 0);  // the program (same uid) cannot open our report fd

  // The request, taken apart in our room: its strings, then a pointer to each, then the files'
  // table; what is left holds the report.
  char chunk[kChunk];
  NativeRequestHead head;
  if (!sys::ReadExact(kRequest, &head, sizeof head)) _exit(0);  // the runner is going away
  if (head.magic != kNativeRequestMagic) ReportError("unreadable request", 0);
  char* room = params.room;
  size_t used = 0;
  auto take = [&](size_t bytes) -> char* {
    used = (used + 15) & ~size_t{15};
    if (bytes > kCallWorkerRoom || used + bytes > kCallWorkerRoom) return nullptr;
    char* at = room + used;
    used += bytes;
    return at;
  };
  char* strings = take(head.strings_len);
  auto** ptrs = reinterpret_cast<char**>(take(NativeRequestPointers(head) * sizeof(char*)));
  auto* table = reinterpret_cast<NativeRequestFile*>(take(head.nfiles * sizeof(NativeRequestFile)));
  if (!strings || !ptrs || !table) ReportError("request too large", 0);
  if (params.room_used) *params.room_used = used;  // about to be written whole
  if (!sys::ReadExact(kRequest, strings, head.strings_len)) _exit(0);
  NativeRequestView req;
  if (const char* bad = SplitNativeRequest(head, strings, ptrs, NativeRequestPointers(head), &req))
    ReportError(bad, 0);
  if (!sys::ReadExact(kRequest, table, head.nfiles * sizeof(NativeRequestFile))) _exit(0);
  // The call's /tmp, open until our exit: the files are written there, and brought back from it.
  const int tmp = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (uint32_t i = 0; i < head.nfiles; ++i) {
    const char* name = req.file_names[i];
    const int fd = tmp >= 0 && *name && !strchr(name, '/')
                       ? openat(tmp, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                                table[i].mode & 0777)
                       : -1;
    const bool read_all = fd >= 0 ? CopyIn(fd, table[i].len, chunk) : Skip(table[i].len, chunk);
    if (fd >= 0) close(fd);
    if (!read_all) _exit(0);
  }
  close(kRequest);
  if (chdir(req.cwd) != 0) {
    char msg[512];
    Text m{msg, sizeof msg};
    m.Add("warren: chdir ").Add(req.cwd).Add(": ").Add(ErrorText(errno)).Add("\n");
    sys::WriteFull(2, std::string_view(msg, m.len));
    WriteFrameHead("{\"exit_code\": 126, \"signal\": 0, \"cpu_ms\": 0, \"maxrss_kb\": 0}", 0);
    _exit(0);
  }
  if (const char* failed = warren_call_set_limits(&head.limits)) SetupFailed(failed);

  // The program's PATH is its environment's, or a shell's default: never ours.
  const char* path = "/usr/local/bin:/usr/bin:/bin";
  for (char** e = req.envp; *e; ++e)
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  ProgramSpawn spawn{req.argv, req.envp, path};
  signal(SIGUSR1, OnUsr1);  // still blocked, since the clone: unblocked once the program is
  // SIGUSR1 has been blocked since pid 1 began, and CloneVforkedOn leaves the mask as it was:
  // one sent before the program existed is delivered when the mask clears below.
  const pid_t pid = CloneVforkedOn(ProgramMain, &spawn, params.spawn_stack, kCallWorkerSpawnStack);
  const int spawn_errno = errno;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  errno = spawn_errno;
  if (pid < 0) SetupFailed("spawn the program");
  if (spawn.exec_errno) {  // it never ran: say why where the program's errors go
    char msg[512];
    Text m{msg, sizeof msg};
    m.Add("warren: exec ").Add(req.argv[0]).Add(": ").Add(ErrorText(spawn.exec_errno)).Add("\n");
    sys::WriteFull(2, std::string_view(msg, m.len));
  }
  close(0);
  close(1);
  close(2);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // The call is over: what the program started goes too, and is waited for, so that the usage
  // counts every process of the call (a child that did the work and was never waited for
  // would otherwise pass under the memory and time limits).
  if (!NoneLeft()) {
    kill(-1, SIGKILL);
    while (waitpid(-1, nullptr, __WALL) > 0 || errno == EINTR) {
    }
  }
  // What is left of the room: the files to bring back (a compile's only) and the report.
  Artifact* files = nullptr;
  size_t nfiles = 0;
  if (head.ncollect) {
    constexpr size_t kNames = kMaxArtifacts * 256;
    files = reinterpret_cast<Artifact*>(take(kMaxArtifacts * sizeof(Artifact)));
    char* names = take(kNames);
    if (!files || !names) ReportError("no room for the report", 0);
    if (params.room_used) *params.room_used = used;
    if (tmp >= 0) nfiles = OpenArtifacts(tmp, req.collect, head.ncollect, files, names, kNames);
  }
  char* rest = take(0);  // the report, in what is left
  if (!rest || used >= kCallWorkerRoom) ReportError("no room for the report", 0);
  Text report{rest, kCallWorkerRoom - used};
  report.mark = params.room_used;
  report.base = used;
  ReportRun(status, files, nfiles, report, head.ncollect > 0, chunk);
}

}  // namespace warren::agent
