#include "agent/call_worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/exec_spawn.h"
#include "agent/protocol.h"
#include "isolation/call_limits.h"
#include "isolation/call_setup.h"
#include "sys/copy_at_clone.h"
#include "sys/fd_io.h"

namespace warren::agent {
namespace {

using nlohmann::json;

constexpr int kRequest = 3, kReport = 4;
constexpr uint64_t kArtifactLimit = 64ull << 20;

volatile pid_t g_target = 0;  // the program, which SIGUSR1 ends
bool g_sample = false;        // CallWorkerParams::sample

void OnUsr1(int) {
  if (g_target > 0) kill(g_target, SIGKILL);
}

[[noreturn]] void Report(const json& h, const std::string& payload, int code) {
  sys::WriteFull(kReport, EncodeFrame(h, payload));
  if (g_sample) warren_send_written_pages(kReport);  // the forker's sample run: its list
  _exit(code);
}

[[noreturn]] void SetupFailed(const char* what) {
  Report({{"error", std::string("worker setup: ") + what + ": " + strerror(errno)}}, "", 1);
}

// The request's limits, each capped at the runner's own; one that cannot be set refuses the
// call rather than run it without.
void SetLimits(const json& l) {
  const warren_call_limits limits = {l.value("cpu_s", 0ull),       l.value("as_bytes", 0ull),
                                     l.value("stack_bytes", 0ull), l.value("fsize_bytes", 0ull),
                                     l.value("nproc", 0ull),       l.value("nofile", 0ull)};
  if (const char* failed = warren_call_set_limits(&limits)) SetupFailed(failed);
}

// The files the run asked to keep (a compiler's output): regular files only, no links
// followed, no blocking on a FIFO the program left there.
std::string ReadArtifacts(const json& names, json* meta) {
  std::vector<std::string> want;
  for (const auto& n : names) {
    std::string name = n.get<std::string>();
    if (name.rfind("*.", 0) == 0) {
      std::vector<std::string> found;
      if (DIR* d = opendir("/tmp")) {
        while (dirent* e = readdir(d)) {
          std::string f = e->d_name;
          if (f.size() > name.size() - 1 &&
              f.compare(f.size() - (name.size() - 1), name.size() - 1, name, 1) == 0)
            found.push_back(f);
        }
        closedir(d);
      }
      std::sort(found.begin(), found.end());
      want.insert(want.end(), found.begin(), found.end());
    } else if (name.find('/') == std::string::npos) {
      want.push_back(name);
    }
  }
  std::string out;
  *meta = json::array();
  for (const auto& name : want) {
    int fd = open(("/tmp/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    std::string data;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        out.size() + static_cast<uint64_t>(st.st_size) <= kArtifactLimit &&
        sys::ReadFull(fd, static_cast<size_t>(st.st_size), &data)) {
      meta->push_back({{"name", name}, {"len", data.size()}, {"mode", st.st_mode & 0755}});
      out += data;
    }
    close(fd);
  }
  return out;
}

// The program's side of the spawn: it shares pid 1's memory (CLONE_VM | CLONE_VFORK), so
// it only undoes what pid 1 set for itself and execs; what failed is left in `exec_errno`.
struct ProgramSpawn {
  ExecPlan* plan;
  int exec_errno = 0;
};

int ProgramMain(void* arg) {
  auto* p = static_cast<ProgramSpawn*>(arg);
  for (int s : {SIGUSR1, SIGPIPE, SIGXFSZ}) signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ExecPlanned(*p->plan);
  p->exec_errno = errno;
  _exit(errno == ENOENT ? 127 : 126);
}

// Starts the program without copying pid 1's page tables (the fork it replaced cost more than
// the program's own exec here). Returns its pid, or -1 with errno.
pid_t SpawnProgram(ProgramSpawn* spawn) {
  // SIGUSR1 has been blocked since pid 1 began, and CloneVforked leaves the mask as it was: one
  // sent before the program existed is delivered when the mask clears below, with g_target
  // naming the program.
  const pid_t pid = CloneVforked(ProgramMain, spawn);
  const int err = errno;
  if (pid > 0) g_target = pid;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  errno = err;
  return pid;
}

}  // namespace

[[noreturn]] void RunCallWorker(const CallWorkerParams& params) {
  g_sample = params.sample;
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

  // The request.
  std::string head, body;
  if (!sys::ReadFull(kRequest, 8, &head)) _exit(0);  // the runner is going away
  uint32_t total, hlen;
  memcpy(&total, head.data(), 4);
  memcpy(&hlen, head.data() + 4, 4);
  if (total < 4 || hlen > total - 4 || !sys::ReadFull(kRequest, total - 4, &body)) _exit(0);
  close(kRequest);
  json req = json::parse(body.substr(0, hlen), nullptr, false);
  if (!req.is_object()) Report({{"error", "unreadable request"}}, "", 1);
  size_t pos = hlen;
  for (const auto& f : req.value("files", json::array())) {
    std::string name = f.value("name", "");
    size_t len = f.value("len", size_t{0});
    if (name.empty() || name.find('/') != std::string::npos || pos + len > body.size()) continue;
    int fd = open(("/tmp/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                  f.value("mode", 0644u) & 0777);
    if (fd >= 0) {
      sys::WriteFull(fd, std::string_view(body).substr(pos, len));
      close(fd);
    }
    pos += len;
  }
  std::string cwd = req.value("cwd", "/tmp");
  if (chdir(cwd.c_str()) != 0) {
    std::string msg = "warren: chdir " + cwd + ": " + strerror(errno) + "\n";
    sys::WriteFull(2, msg);
    Report({{"exit_code", 126}, {"signal", 0}, {"cpu_ms", 0}, {"maxrss_kb", 0}}, "", 0);
  }
  std::vector<std::string> env, argv;
  const json env_doc = req.value("env", json::object());
  for (const auto& [k, v] : env_doc.items())
    if (v.is_string()) env.push_back(k + "=" + v.get<std::string>());
  for (const auto& a : req.value("argv", json::array()))
    if (a.is_string()) argv.push_back(a.get<std::string>());
  if (argv.empty()) Report({{"error", "empty argv"}}, "", 1);
  SetLimits(req.value("limits", json::object()));

  ExecPlan plan = PlanExec(argv, env, "/usr/local/bin:/usr/bin:/bin");
  ProgramSpawn spawn{&plan};
  signal(SIGUSR1, OnUsr1);  // still blocked, since the clone: SpawnProgram unblocks it
  const pid_t pid = SpawnProgram(&spawn);
  if (pid < 0) SetupFailed("spawn the program");
  if (spawn.exec_errno) {  // it never ran: say why where the program's errors go
    std::string msg = "warren: exec " + argv[0] + ": " + strerror(spawn.exec_errno) + "\n";
    sys::WriteFull(2, msg);
  }
  close(0);
  close(1);
  close(2);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_target = 0;
  // The call is over: what the program started goes too, and is waited for, so that the usage
  // counts every process of the call (a child that did the work and was never waited for
  // would otherwise pass under the memory and time limits).
  kill(-1, SIGKILL);
  while (waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  json rep = {{"exit_code", WIFEXITED(status) ? WEXITSTATUS(status) : -1},
              {"signal", WIFSIGNALED(status) ? WTERMSIG(status) : 0},
              {"cpu_ms", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
                             (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000},
              {"maxrss_kb", ru.ru_maxrss}};
  std::string files;
  if (req.contains("collect")) {
    json meta;
    files = ReadArtifacts(req["collect"], &meta);
    rep["files"] = meta;
  }
  Report(rep, files, 0);
}

}  // namespace warren::agent
