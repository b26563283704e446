#include "agent/call_worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
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

#include "agent/protocol.h"
#include "isolation/call_setup.h"
#include "sys/fd_io.h"

namespace warren::agent {
namespace {

using nlohmann::json;

constexpr int kStdin = 0, kRequest = 3, kReport = 4, kSeccomp = 5;
constexpr uint64_t kArtifactLimit = 64ull << 20;

volatile pid_t g_target = 0;  // who SIGUSR1 is passed on to (the worker, then the program)

void OnUsr1(int) {
  if (g_target > 0) kill(g_target, SIGKILL);
}

[[noreturn]] void Report(const json& h, const std::string& payload, int code) {
  sys::WriteFull(kReport, EncodeFrame(h, payload));
  _exit(code);
}

[[noreturn]] void SetupFailed(const char* what) {
  Report({{"error", std::string("worker setup: ") + what + ": " + strerror(errno)}}, "", 1);
}

void SetLimit(int resource, uint64_t value) {
  rlimit cur{};
  getrlimit(resource, &cur);
  rlim_t v = static_cast<rlim_t>(value);
  if (cur.rlim_max != RLIM_INFINITY) v = std::min(v, cur.rlim_max);
  rlimit r{v, v};
  setrlimit(resource, &r);
}

void SetLimits(const json& l) {
  if (uint64_t cpu = l.value("cpu_s", uint64_t{0})) {
    rlimit r{cpu, cpu + 1};  // SIGXCPU, then SIGKILL a second later
    setrlimit(RLIMIT_CPU, &r);
  }
  if (uint64_t v = l.value("as_bytes", uint64_t{0})) SetLimit(RLIMIT_AS, v);
  if (uint64_t v = l.value("stack_bytes", uint64_t{0})) SetLimit(RLIMIT_STACK, v);
  if (uint64_t v = l.value("fsize_bytes", uint64_t{0})) SetLimit(RLIMIT_FSIZE, v);
  if (uint64_t v = l.value("nproc", uint64_t{0})) SetLimit(RLIMIT_NPROC, v);
  if (uint64_t v = l.value("nofile", uint64_t{0})) SetLimit(RLIMIT_NOFILE, v);
  rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
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

// Pid 1 of the call's namespaces.
[[noreturn]] void Worker(uid_t uid, uint64_t tmp_bytes, unsigned flags, unsigned long root_flags) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the spawned parent killed: the whole call goes
  std::string bpf;
  {
    // Every worker shares this memfd's file offset with the others: pread, never read.
    struct stat st {};
    if (fstat(kSeccomp, &st) != 0) SetupFailed("stat seccomp filter");
    bpf.resize(static_cast<size_t>(st.st_size));
    for (size_t off = 0; off < bpf.size();) {
      ssize_t n = pread(kSeccomp, bpf.data() + off, bpf.size() - off, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) SetupFailed("read seccomp filter");
      off += static_cast<size_t>(n);
    }
    close(kSeccomp);
  }
  // The recipe every call's worker follows, Python or native (isolation/call_setup.h).
  const warren_call_params setup{uid, tmp_bytes, flags, root_flags, bpf.data(), bpf.size()};
  if (const char* failed = warren_call_setup(&setup)) SetupFailed(failed);
  prctl(PR_SET_DUMPABLE, 0);  // the program (same uid) cannot open our report fd

  // The request.
  std::string head, body;
  if (!sys::ReadFull(kRequest, 8, &head)) _exit(0);  // the runner is going away
  uint32_t total, hlen;
  memcpy(&total, head.data(), 4);
  memcpy(&hlen, head.data() + 4, 4);
  if (hlen > total - 4 || !sys::ReadFull(kRequest, total - 4, &body)) _exit(0);
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
      sys::WriteFull(fd, body.substr(pos, len));
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
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  const json env_doc = req.value("env", json::object());
  for (const auto& [k, v] : env_doc.items()) {
    if (!v.is_string()) continue;
    env.push_back(k + "=" + v.get<std::string>());
    if (k == "PATH") path = v.get<std::string>();
  }
  for (const auto& a : req.value("argv", json::array())) argv.push_back(a.get<std::string>());
  if (argv.empty()) Report({{"error", "empty argv"}}, "", 1);
  SetLimits(req.value("limits", json::object()));

  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  setenv("PATH", path.c_str(), 1);  // execvpe searches the PATH of the call's environment
  signal(SIGUSR1, OnUsr1);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_UNBLOCK, &usr1, nullptr);  // blocked since the spawn: its handler is in place now
  pid_t pid = fork();
  if (pid == 0) {
    // The report is ours: a program holding its pipe could write one before ours and pass off
    // its own exit code, CPU time and memory.
    close(kReport);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGXFSZ, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(cargv[0], cargv.data(), cenv.data());
    int err = errno;
    std::string msg = "warren: exec " + argv[0] + ": " + strerror(err) + "\n";
    sys::WriteFull(2, msg);
    _exit(err == ENOENT ? 127 : 126);
  }
  if (pid < 0) SetupFailed("fork");
  g_target = pid;
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

}  // namespace

int CallWorkerMain(int argc, char** argv) {
  if (argc < 6) return 2;
  const uid_t uid = static_cast<uid_t>(strtoul(argv[2], nullptr, 10));
  const uint64_t tmp_bytes = strtoull(argv[3], nullptr, 10);
  const unsigned flags = static_cast<unsigned>(strtoul(argv[4], nullptr, 10));
  const unsigned long root_flags = strtoul(argv[5], nullptr, 10);
  // A net namespace from the zygote (fd argv[6]): one an earlier call left as new, or new; it
  // goes back to the zygote for checking when this call is over. -1: make our own.
  const int netns = argc > 6 ? atoi(argv[6]) : -1;
  // Should the runner run out of memory, a call goes first, never the dispatcher (all share the
  // runner's cgroup).
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    sys::WriteFull(fd, "1000");
    close(fd);
  }
  int ns_flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID;
  if (netns < 0) {
    ns_flags |= CLONE_NEWNET;
  } else {
    int rc = setns(netns, CLONE_NEWNET);
    int e = errno;
    close(netns);  // never the program's
    if (rc != 0) {
      sys::WriteFull(
          kReport,
          EncodeFrame({{"error", std::string("worker setup: setns net: ") + strerror(e)}}));
      return 1;
    }
  }
  if (unshare(ns_flags) != 0) {
    int e = errno;
    sys::WriteFull(kReport,
                   EncodeFrame({{"error", std::string("worker setup: unshare: ") + strerror(e)}}));
    return 1;
  }
  pid_t pid = fork();  // pid 1 of the new pid namespace
  if (pid == 0) Worker(uid, tmp_bytes, flags, root_flags);
  if (pid < 0) {
    int e = errno;
    sys::WriteFull(kReport,
                   EncodeFrame({{"error", std::string("worker setup: fork: ") + strerror(e)}}));
    return 1;
  }
  // The dispatcher's SIGUSR1 (out of time or output) goes on to the worker, which ends the
  // program and still reports its usage. We keep none of the call's pipes open.
  g_target = pid;
  for (int fd = 0; fd <= kSeccomp; ++fd) close(fd);
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    if (g_target > 0) kill(g_target, SIGUSR1);
  };
  sigaction(SIGUSR1, &sa, nullptr);
  // The dispatcher spawned us with SIGUSR1 blocked: one that came before now would have ended
  // us (its default) and left the call running. Now it is passed on.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return 0;
}

}  // namespace warren::agent
