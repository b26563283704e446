#include "agent/call_dispatcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "agent/native_forker.h"
#include "agent/native_request.h"
#include "agent/protocol.h"
#include "agent/python_request.h"
#include "base/unique_fd.h"
#include "isolation/call_setup.h"
#include "sys/fd_io.h"
#include "sys/fd_passing.h"

extern char** environ;

namespace warren::agent {
namespace {

using nlohmann::json;

constexpr size_t kReadChunk = 1 << 16;

// What python3 runs: zygote.py arrives on its stdin (its length, then it), then its config.
constexpr char kBootstrap[] =
    "import os\n"
    "def r(n):\n"
    "    b = b''\n"
    "    while len(b) < n:\n"
    "        c = os.read(0, n - len(b))\n"
    "        if not c: raise SystemExit(1)\n"
    "        b += c\n"
    "    return b\n"
    "src = r(int.from_bytes(r(4), 'little'))\n"
    "exec(compile(src, 'zygote.py', 'exec'), {'__name__': '__main__'})\n";

[[noreturn]] void Die(const std::string& why) {
  std::string line = "warren call dispatcher: " + why + "\n";
  (void)!write(2, line.data(), line.size());
  _exit(1);
}

std::string ErrnoText(const std::string& what, int err) { return what + ": " + strerror(err); }

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string ReadSmall(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[4096];
  ssize_t n;
  do n = read(fd, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// A live worker's CPU time (its own and its waited-for children's, in ticks) and peak RSS as
// the kernel counts them; zeros if it is gone (its end's report then has them).
std::pair<int64_t, int64_t> KernelUsage(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::string stat = ReadSmall(dir + "/stat"), status = ReadSmall(dir + "/status");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return {0, 0};
  std::vector<std::string_view> f;
  std::string_view rest(stat);
  rest.remove_prefix(paren + 1);
  while (!rest.empty() && f.size() < 15) {
    size_t b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) break;
    rest.remove_prefix(b);
    size_t e = rest.find(' ');
    f.push_back(rest.substr(0, e));
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
  }
  if (f.size() < 15) return {0, 0};
  int64_t ticks = 0;
  for (int i = 11; i <= 14; ++i)
    ticks += strtoll(std::string(f[i]).c_str(), nullptr, 10);  // u/s time, cu/cs time
  int64_t hwm = 0;
  if (size_t at = status.find("VmHWM:"); at != std::string::npos)
    hwm = strtoll(status.c_str() + at + 6, nullptr, 10);
  return {ticks * 1000 / sysconf(_SC_CLK_TCK), hwm};
}

int64_t IntOr0(const json& v) { return v.is_number_integer() ? v.get<int64_t>() : 0; }

// ---- The runner's configuration, from the node's first frame.

struct Config {
  int uid_base = 10000;
  int max_workers = 4;
  int prefork = 2;
  uint64_t tmp_bytes = 256ull << 20;
  uint64_t artifact_limit = 64ull << 20;
  unsigned setup_flags = 0;      // WARREN_CALL_* (isolation/call_setup.h)
  unsigned long root_flags = 0;  // the flags / keeps when workers remount it read-only
  std::string python = "python3";
};

unsigned long RootFlags() {
  struct statvfs s;
  if (statvfs("/", &s) != 0) return 0;
  const std::pair<unsigned long, unsigned long> map[] = {
      {ST_RDONLY, MS_RDONLY},    {ST_NOSUID, MS_NOSUID},   {ST_NODEV, MS_NODEV},
      {ST_NOEXEC, MS_NOEXEC},    {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME},
      {ST_RELATIME, MS_RELATIME}};
  unsigned long out = 0;
  for (auto [st, ms] : map)
    if (s.f_flag & st) out |= ms;
  return out;
}

unsigned SetupFlags() {
  unsigned flags = 0;
  int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string all, chunk(kReadChunk, '\0');
    ssize_t n;
    while ((n = read(fd, chunk.data(), chunk.size())) > 0)
      all.append(chunk.data(), static_cast<size_t>(n));
    close(fd);
    if (all.find(" shared:") != std::string::npos)
      flags |= WARREN_CALL_MAKE_PRIVATE;  // / is shared: workers make it private
  }
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) flags |= WARREN_CALL_HAS_SHM;
  return flags;
}

// ---- The dispatcher.

enum class What { kOut, kErr, kStatus, kStdin, kNativeExit };
constexpr unsigned kOpenOut = 1, kOpenErr = 2, kOpenStatus = 4, kOpenExit = 8;

// What every run of one request shares: a judged call's cases are one request (one program,
// its files once, a stdin per case), so the node makes one round trip per call, not per case.
struct RunSpec {
  json id;
  bool python = false;
  std::string request;  // what each run's worker reads (the same for every case), made once
  double wall_s = 10;
  size_t max_output = 1 << 20;  // per stream
  bool kill_at_output_cap = true;
};

// The runs of one request not yet started, started `parallel` at a time as earlier ones end.
struct Batch {
  std::shared_ptr<const RunSpec> spec;
  std::vector<std::string> stdins;  // one per run, moved out as each starts
  size_t next = 0;
  size_t running = 0;
  size_t parallel = 1;
};

struct Run {
  std::shared_ptr<const RunSpec> spec;
  std::shared_ptr<Batch> batch;
  size_t index = 0;  // its case in the request, sent back with its result
  bool python = false;
  std::string out[2];
  bool truncated[2] = {false, false};
  std::string status;  // the worker's report, as it arrives
  unsigned open = 0;   // kOpen*: what the result still waits for
  double start = 0, deadline = 0, killed_at = -1;
  bool timed_out = false, output_limit = false;
  size_t max_output = 1 << 20;  // per stream, from its limits (read once, not per chunk)
  bool kill_at_output_cap = true;
  std::string stdin_data;
  size_t stdin_off = 0;
};

struct Worker {
  bool native = false;  // false: cloned by the zygote (Python); true: by the native forker
  int uid = 0;
  int req_w = -1, stdin_w = -1, out_r = -1, err_r = -1, status_r = -1;  // our ends of its pipes
  pid_t pid = 0;
  int pidfd = -1;
  std::unique_ptr<Run> run;
  json exit;              // the report of its end (the zygote's, or ours for a native worker)
  bool finished = false;  // its run's result was sent; waiting only for its end
};
using WorkerPtr = std::shared_ptr<Worker>;

class Dispatcher {
 public:
  Dispatcher(Config cfg, int zsock, int forker, json hello)
      : cfg_(std::move(cfg)), zsock_(zsock), forker_(forker), hello_(std::move(hello)) {
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string_view::npos)
        env_[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
    for (int u = cfg_.uid_base; u < cfg_.uid_base + cfg_.max_workers * 2; ++u)
      free_uids_.push_back(u);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) Die(ErrnoText("epoll_create1", errno));
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    AddToEpoll(0, kChannelToken, EPOLLIN);
    AddToEpoll(zsock_, kZygoteToken, EPOLLIN);
    AddToEpoll(forker_, kForkerToken, EPOLLIN);
  }

  [[noreturn]] void Loop() {
    TopUp();
    Send({{"t", "ready"},
          {"pid", getpid()},
          {"python", hello_.value("python", "")},
          {"zygote", hello_.value("zygote", "python")},
          {"zygote_why", hello_.value("why", "")},
          {"copied_at_clone", hello_.value("copied_at_clone", 0)},
          {"copy_at_clone_why", hello_.value("copy_at_clone_why", "")},
          {"native_pid1", hello_.value("native_pid1", "")}});
    epoll_event evs[64];
    for (;;) {
      const double wait = CheckDeadlines();
      const int timeout = wait < 0 ? -1 : static_cast<int>(std::min(std::ceil(wait * 1000), 3.6e6));
      int n = epoll_wait(ep_, evs, 64, timeout);
      if (n < 0 && errno != EINTR) Die(ErrnoText("epoll_wait", errno));
      for (int i = 0; i < n; ++i) {
        const uint64_t token = evs[i].data.u64;
        if (token == kChannelToken)
          OnChannel();
        else if (token == kZygoteToken)
          OnZygote();
        else if (token == kForkerToken)
          OnForker();
        else if (auto it = watches_.find(token); it != watches_.end())
          OnWorker(token);
        // else: closed by an earlier event of this batch
      }
    }
  }

 private:
  static constexpr uint64_t kChannelToken = 1, kZygoteToken = 2, kForkerToken = 3;
  struct Watch {
    int fd;
    WorkerPtr worker;
    What what;
  };

  void AddToEpoll(int fd, uint64_t token, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) Die(ErrnoText("epoll_ctl add", errno));
  }

  // Events on `fd` go to OnWorker. A token, not the fd, names it: a number closed and reused
  // within one batch of events must not get the old one's. Our pipe ends have no other status
  // flag (MakePipes), so O_NONBLOCK is set without reading them first: on this kind of guest
  // each system call costs a few microseconds of its own.
  void WatchFd(int fd, const WorkerPtr& w, What what, uint32_t events) {
    const uint64_t token = next_token_++;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    AddToEpoll(fd, token, events);
    watches_[token] = {fd, w, what};
    token_of_[fd] = token;
  }

  // Closing the last fd of a file takes it out of the epoll set too: our pipe ends are held by
  // no other process and never dup'ed, so they need no EPOLL_CTL_DEL. A pidfd does: the native
  // forker holds its own until it next looks for a slot, and an ended pid 1's would stay in
  // the set, readable, until then.
  void CloseFd(int* fd) {
    if (*fd < 0) return;
    if (auto it = token_of_.find(*fd); it != token_of_.end()) {
      if (watches_.at(it->second).what == What::kNativeExit)
        epoll_ctl(ep_, EPOLL_CTL_DEL, *fd, nullptr);
      watches_.erase(it->second);
      token_of_.erase(it);
    }
    close(*fd);
    *fd = -1;
  }

  void Send(const json& h, std::string_view payload = {}) {
    if (!sys::WriteFull(1, EncodeFrame(h, payload))) _exit(0);  // the node is gone
  }

  void Log(const std::string& error) { Send({{"t", "log"}, {"error", error}, {"damaged", true}}); }

  bool SendToZygote(const std::string& msg, const int* fds, size_t nfds) {
    return sys::SendWithFds(zsock_, msg, std::vector<int>(fds, fds + nfds)).ok();
  }

  // Five pipes: request and stdin (theirs read), stdout, stderr and the report (theirs write).
  bool MakePipes(int theirs[5], int ours[5]) {
    for (int i = 0; i < 5; ++i) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) {
        const int err = errno;
        for (int j = 0; j < i; ++j) close(theirs[j]), close(ours[j]);
        errno = err;
        return false;
      }
      const bool to_worker = i < 2;
      theirs[i] = to_worker ? p[0] : p[1];
      ours[i] = to_worker ? p[1] : p[0];
    }
    return true;
  }

  static void TakeEnds(Worker* w, const int ours[5]) {
    w->req_w = ours[0];
    w->stdin_w = ours[1];
    w->out_r = ours[2];
    w->err_r = ours[3];
    w->status_r = ours[4];
  }

  bool ForkWorker() {
    const int uid = free_uids_.front();
    int theirs[5], ours[5];
    if (!MakePipes(theirs, ours)) {
      Log(ErrnoText("fork a worker: pipe2", errno));
      return false;
    }
    const bool sent = SendToZygote("{\"uid\":" + std::to_string(uid) + "}", theirs, 5);
    const int err = errno;
    for (int fd : theirs) close(fd);
    if (!sent) Die(ErrnoText("send to the zygote", err));
    free_uids_.pop_front();
    auto w = std::make_shared<Worker>();
    w->uid = uid;
    TakeEnds(w.get(), ours);
    forking_.push_back(w);
    ++live_;
    return true;
  }

  // A native worker (call_worker.h), asked of the native forker: answered in order (OnForker).
  bool SpawnNative() {
    const int uid = free_uids_.front();
    int theirs[5], ours[5];
    if (!MakePipes(theirs, ours)) {
      Log(ErrnoText("native worker: pipe2", errno));
      return false;
    }
    ForkRequest rq;
    rq.uid = static_cast<uint32_t>(uid);
    const std::vector<int> fds(theirs, theirs + 5);
    const Status sent =
        sys::SendWithFds(forker_, std::string(reinterpret_cast<const char*>(&rq), sizeof rq), fds);
    for (int fd : theirs) close(fd);
    if (!sent.ok()) Die("send to the native forker: " + sent.ToString());
    free_uids_.pop_front();
    auto w = std::make_shared<Worker>();
    w->native = true;
    w->uid = uid;
    TakeEnds(w.get(), ours);
    ++live_;
    native_forking_.push_back(w);
    return true;
  }

  void OnForker() {
    std::string msg;
    std::vector<UniqueFd> received;
    if (Status st = sys::RecvWithFds(forker_, sizeof(ForkAnswer), &msg, &received); !st.ok())
      Die("a message from the native forker: " + st.ToString());
    if (msg.empty()) Die("the native forker ended");
    ForkAnswer answer;
    if (msg.size() != sizeof answer || native_forking_.empty())
      Die("an unreadable or unasked-for answer from the native forker");
    memcpy(&answer, msg.data(), sizeof answer);
    WorkerPtr w = native_forking_.front();
    native_forking_.pop_front();
    if (answer.error != 0 || received.size() != 1) {
      Discard(w);
      Log(ErrnoText("native worker: clone", answer.error ? answer.error : EPROTO));
      DrainQueue();
      return;
    }
    w->pid = answer.pid;
    w->pidfd = received[0].Release();
    by_pid_[w->pid] = w;
    WatchFd(w->pidfd, w, What::kNativeExit, EPOLLIN);
    ready_[1].push_back(w);
    DrainQueue();
  }

  void TopUp() {
    for (int native = 0; native < 2; ++native) {
      size_t queued = 0;
      for (const auto& r : queue_) queued += r->python != static_cast<bool>(native);
      size_t forking = native ? native_forking_.size() : forking_.size();
      while (ready_[native].size() + forking < static_cast<size_t>(cfg_.prefork) + queued &&
             !free_uids_.empty() && live_ < cfg_.max_workers + 2 * cfg_.prefork) {
        if (!(native ? SpawnNative() : ForkWorker())) break;
        ++forking;
      }
    }
  }

  void OnZygote() {
    std::string msg;
    std::vector<UniqueFd> received;
    if (Status st = sys::RecvWithFds(zsock_, 4096, &msg, &received); !st.ok())
      Die("a message from the zygote: " + st.ToString());
    if (msg.empty()) Die("the zygote ended");
    const json rep = json::parse(msg, nullptr, false);  // fds not taken below close with `received`
    if (!rep.is_object()) Die("unreadable message from the zygote");
    if (rep.contains("exited")) {
      auto it = by_pid_.find(static_cast<pid_t>(IntOr0(rep["exited"])));
      if (it == by_pid_.end()) return;
      WorkerPtr w = it->second;
      by_pid_.erase(it);
      w->exit = rep;
      OnWorkerEnd(w);
      return;
    }
    if (forking_.empty()) Die("an unasked-for message from the zygote: " + rep.dump());
    WorkerPtr w = forking_.front();
    forking_.pop_front();
    if (rep.contains("error") || received.empty() || !rep.contains("pid")) {
      Discard(w);
      Log(rep.value("error", "clone: no pid from the zygote"));
      return;
    }
    w->pid = static_cast<pid_t>(IntOr0(rep["pid"]));
    w->pidfd = received[0].Release();
    by_pid_[w->pid] = w;
    ready_[0].push_back(w);
    DrainQueue();
  }

  void OnWorkerEnd(const WorkerPtr& w) {
    if (w->finished) {  // its result went out at its report; now it is gone
      Discard(w);
    } else if (!w->run) {  // died before any call: its set-up failed
      auto& ready = ready_[w->native];
      for (auto it = ready.begin(); it != ready.end(); ++it)
        if (*it == w) {
          ready.erase(it);
          break;
        }
      const std::string err = ReadSetupError(w);
      Discard(w);
      Log(err);
    } else {
      w->run->open &= ~kOpenExit;
      MaybeFinish(w);
    }
    // Its end may free the last slot (`live_`) a queued run was waiting for: with no other
    // event to come (one client, waiting on that run), nothing else would fork for it.
    DrainQueue();
  }

  std::string ReadSetupError(const WorkerPtr& w) {
    const std::string fallback = "worker ended before its call";
    if (w->status_r < 0) return fallback;
    fcntl(w->status_r, F_SETFL, fcntl(w->status_r, F_GETFL) | O_NONBLOCK);
    std::string buf(kReadChunk, '\0');
    ssize_t n = read(w->status_r, buf.data(), buf.size());
    if (n <= 8) return fallback;
    json h =
        json::parse(std::string_view(buf.data() + 8, static_cast<size_t>(n) - 8), nullptr, false);
    return h.is_object() && h.contains("error") && h["error"].is_string()
               ? h["error"].get<std::string>()
               : fallback;
  }

  // Every worker is pid 1 of its call's namespaces, seen to end only once every process of
  // the call is gone: its uid and net namespace are free again at once.
  void Discard(const WorkerPtr& w) {
    for (int* fd : {&w->req_w, &w->stdin_w, &w->out_r, &w->err_r, &w->status_r, &w->pidfd})
      CloseFd(fd);
    free_uids_.push_back(w->uid);
    --live_;
  }

  void OnChannel() {
    char buf[kReadChunk];
    for (;;) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) _exit(0);  // the node closed the channel: the runner is going away
      inbuf_.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) break;
    }
    size_t off = 0;
    while (inbuf_.size() - off >= 8) {
      uint32_t total, hlen;
      memcpy(&total, inbuf_.data() + off, 4);
      memcpy(&hlen, inbuf_.data() + off + 4, 4);
      if (total < 4 || hlen > total - 4) Die("a garbled frame from the node");
      if (inbuf_.size() - off < 4 + static_cast<size_t>(total)) break;
      json h = json::parse(std::string_view(inbuf_.data() + off + 8, hlen), nullptr, false);
      if (h.is_object() && h.value("t", "") == "run")
        Accept(std::move(h), std::string_view(inbuf_.data() + off + 8 + hlen, total - 4 - hlen));
      off += 4 + static_cast<size_t>(total);
    }
    inbuf_.erase(0, off);
    DrainQueue();
  }

  // A run request: its files' bytes, then one stdin per run (`stdin_lens`; without it, the
  // rest is the one run's stdin). Lengths past the payload are cut to it (the node sends what
  // adds up). What a run's worker reads is made here once for all of its cases.
  void Accept(json h, std::string_view payload) {
    auto spec = std::make_shared<RunSpec>();
    spec->id = h.value("id", json(nullptr));
    spec->python = h.value("mode", "") == "python";
    size_t files_len = 0;
    if (h.contains("files") && h["files"].is_array())
      for (const json& f : h["files"])
        files_len += f.is_object() ? static_cast<size_t>(IntOr0(f.value("len", json(0)))) : 0;
    files_len = std::min(files_len, payload.size());
    spec->request = WorkerRequest(h, payload.substr(0, files_len), spec->python);
    const json limits = h.value("limits", json::object());
    const json wall = limits.is_object() ? limits.value("wall_ms", json(10000)) : json(10000);
    spec->wall_s = (wall.is_number() ? wall.get<double>() : 10000.0) / 1000.0;
    const json cap = limits.is_object() ? limits.value("max_output", json(1 << 20)) : json(1 << 20);
    spec->max_output = cap.is_number_integer()
                           ? static_cast<size_t>(std::max<int64_t>(0, cap.get<int64_t>()))
                           : (1u << 20);
    spec->kill_at_output_cap = limits.is_object() ? limits.value("kill_at_output_cap", true) : true;
    payload.remove_prefix(files_len);
    auto batch = std::make_shared<Batch>();
    if (h.contains("stdin_lens") && h["stdin_lens"].is_array()) {
      for (const json& l : h["stdin_lens"]) {
        const size_t len =
            std::min(static_cast<size_t>(std::max<int64_t>(0, IntOr0(l))), payload.size());
        batch->stdins.emplace_back(payload.substr(0, len));
        payload.remove_prefix(len);
      }
    } else {
      batch->stdins.emplace_back(payload);
    }
    batch->parallel =
        static_cast<size_t>(std::max<int64_t>(1, IntOr0(h.value("parallel", json(1)))));
    batch->spec = std::move(spec);
    Feed(batch);
  }

  // Python workers read what the C zygote applies and a marshal'd dict
  // (runtime/fncall/zygote_request.h), without the environment when it is the zygote's own;
  // native ones a frame (call_worker.cc).
  std::string WorkerRequest(const json& h, std::string_view files, bool python) const {
    json req = json::object();
    for (const char* k :
         {"mode", "argv", "code", "args", "filename", "env", "files", "limits", "collect", "cwd"})
      if (h.contains(k)) req[k] = h[k];
    if (!python) return EncodeNativeRequest(req, files);
    json env = req.contains("env") ? req["env"] : json::object();
    req.erase("env");
    if (!SameEnv(env)) req["env"] = env;
    return EncodePythonRequest(req, files);
  }

  // Queues the batch's next runs, up to its `parallel` at once.
  void Feed(const std::shared_ptr<Batch>& batch) {
    while (batch->running < batch->parallel && batch->next < batch->stdins.size()) {
      auto run = std::make_unique<Run>();
      run->spec = batch->spec;
      run->batch = batch;
      run->index = batch->next;
      run->python = batch->spec->python;
      run->stdin_data = std::move(batch->stdins[batch->next++]);
      ++batch->running;
      queue_.push_back(std::move(run));
    }
  }

  // Starts every queued run a worker is ready for, then makes workers for the rest; again while
  // that made one ready at once (a native worker is ready as soon as it is spawned).
  void DrainQueue() {
    for (;;) {
      std::deque<std::unique_ptr<Run>> waiting;
      while (!queue_.empty()) {
        std::unique_ptr<Run> run = std::move(queue_.front());
        queue_.pop_front();
        auto& ready = ready_[!run->python];
        if (ready.empty()) {
          waiting.push_back(std::move(run));
          continue;
        }
        WorkerPtr w = ready.front();
        ready.pop_front();
        Start(w, std::move(run));
      }
      queue_ = std::move(waiting);
      TopUp();
      bool startable = false;
      for (const auto& run : queue_) startable = startable || !ready_[!run->python].empty();
      if (!startable) return;
    }
  }

  void Start(const WorkerPtr& w, std::unique_ptr<Run> run) {
    const RunSpec& spec = *run->spec;
    run->start = Now();
    run->deadline = run->start + spec.wall_s;
    run->max_output = spec.max_output;
    run->kill_at_output_cap = spec.kill_at_output_cap;
    run->open = kOpenOut | kOpenErr | kOpenStatus | kOpenExit;
    WatchFd(w->out_r, w, What::kOut, EPOLLIN);
    WatchFd(w->err_r, w, What::kErr, EPOLLIN);
    WatchFd(w->status_r, w, What::kStatus, EPOLLIN);
    w->run = std::move(run);
    // If W is gone, its end (and the error it left) comes later.
    sys::WriteFull(w->req_w, spec.request);
    CloseFd(&w->req_w);
    if (!w->run->stdin_data.empty())
      WatchFd(w->stdin_w, w, What::kStdin, EPOLLOUT);
    else
      CloseFd(&w->stdin_w);
  }

  bool SameEnv(const json& env) const {
    if (!env.is_object() || env.size() != env_.size()) return false;
    for (const auto& [k, v] : env.items()) {
      auto it = env_.find(k);
      if (it == env_.end() || !v.is_string() || v.get_ref<const std::string&>() != it->second)
        return false;
    }
    return true;
  }

  void OnWorker(uint64_t token) {
    Watch watch = watches_.at(token);
    const WorkerPtr& w = watch.worker;
    Run* run = w->run.get();
    if (watch.what == What::kNativeExit) {
      // Pid 1 ended, and with it every process of the call. Its report, if it wrote one, is in
      // the pipe already; without a whole one, it ended some other way: as if killed.
      if (run && w->status_r >= 0) {
        char more[kReadChunk];
        ssize_t n;
        while ((n = read(w->status_r, more, sizeof more)) > 0 &&
               run->status.size() < cfg_.artifact_limit + (1u << 20))
          run->status.append(more, static_cast<size_t>(n));
      }
      CloseFd(&w->pidfd);  // the forker's child: the kernel reaps it
      by_pid_.erase(w->pid);
      w->exit = {{"exit_code", -1}, {"signal", SIGKILL}};  // counts only without a report
      OnWorkerEnd(w);
      return;
    }
    if (watch.what == What::kStdin) {
      if (run) {
        ssize_t n = write(watch.fd, run->stdin_data.data() + run->stdin_off,
                          std::min(kReadChunk, run->stdin_data.size() - run->stdin_off));
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        run->stdin_off = n < 0 ? run->stdin_data.size()
                               : run->stdin_off + static_cast<size_t>(n);  // < 0: closed
        if (run->stdin_off < run->stdin_data.size()) return;
        run->stdin_data.clear();
      }
      CloseFd(&w->stdin_w);
      return;
    }
    char buf[kReadChunk];
    ssize_t n = read(watch.fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0 || !run) {
      int* fd = watch.what == What::kStatus ? &w->status_r
                : watch.what == What::kOut  ? &w->out_r
                                            : &w->err_r;
      CloseFd(fd);
      if (!run) return;
      run->open &= ~(watch.what == What::kStatus ? kOpenStatus
                     : watch.what == What::kOut  ? kOpenOut
                                                 : kOpenErr);
      MaybeFinish(w);
      return;
    }
    std::string_view data(buf, static_cast<size_t>(n));
    if (watch.what == What::kStatus) {
      run->status.append(data);
      if (run->status.size() > cfg_.artifact_limit + (1u << 20)) {
        Kill(w, true);
      } else if (WholeReport(*run)) {
        // W's whole report is in: the result need not wait for the pipe's end, which comes
        // only when W's exit has torn down its copy of the interpreter.
        CloseFd(&w->status_r);
        run->open &= ~kOpenStatus;
        MaybeFinish(w);
      }
      return;
    }
    const int s = watch.what == What::kOut ? 0 : 1;
    const size_t room =
        run->max_output > run->out[s].size() ? run->max_output - run->out[s].size() : 0;
    if (data.size() > room) {
      run->truncated[s] = true;
      if (run->kill_at_output_cap && !run->output_limit) {
        run->output_limit = true;
        Kill(w, false);
      }
      data = data.substr(0, room);
    }
    run->out[s].append(data);
  }

  // Python runs in W itself: end it. A spawned program is ended by W (SIGUSR1), which then
  // reports its usage; W is killed outright if it has not done so within 0.5 s.
  void Kill(const WorkerPtr& w, bool hard) {
    Run* run = w->run.get();
    if (w->pidfd < 0 || !run) return;
    const int sig = hard || run->python ? SIGKILL : SIGUSR1;
    if (run->killed_at < 0 || hard) {
      run->killed_at = Now();
      syscall(SYS_pidfd_send_signal, w->pidfd, sig, nullptr, 0);
    }
  }

  static bool WholeReport(const Run& run) {
    uint32_t total = 0;
    if (run.status.size() >= 4) memcpy(&total, run.status.data(), 4);
    return run.status.size() >= 8 && run.status.size() >= 4 + static_cast<size_t>(total);
  }

  // W's own report (status pipe): its header, or null, and the files it brought back.
  static std::pair<json, std::string_view> Report(const Run& run) {
    const std::string& st = run.status;
    if (st.size() < 8) return {json(), {}};
    uint32_t total, hl;
    memcpy(&total, st.data(), 4);
    memcpy(&hl, st.data() + 4, 4);
    const size_t hend = std::min(st.size(), 8 + static_cast<size_t>(hl));
    json rep = json::parse(std::string_view(st).substr(8, hend - 8), nullptr, false);
    if (!rep.is_object()) return {json(), {}};
    const size_t end = std::max(hend, std::min(st.size(), 4 + static_cast<size_t>(total)));
    return {std::move(rep), std::string_view(st).substr(hend, end - hend)};
  }

  // The result goes out once stdout, stderr and W's report are in, without waiting for W's
  // namespaces to be torn down; W's uid is reused only after W is seen to end. Without a
  // report (W was killed, or a Python program closed or spoiled it), the report of W's end is
  // the result.
  //
  // A Python program runs in the process that reports it, so it can write a report of its own
  // first: only its exit code counts (the program could choose that anyway). Its time and memory
  // are the kernel's (never less than its live process's, or its end's), it brings back no
  // files, and an error from it is no sign of damage (which would take the runner, and every
  // call in it, out of service). Native workers' reports are their own (the program never
  // holds the pipe), but the result carries only what has the right type even so.
  void MaybeFinish(const WorkerPtr& w) {
    Run* run = w->run.get();
    if (!run || (run->open & ~kOpenExit)) return;
    auto [rep, files] = Report(*run);
    const bool ended = !(run->open & kOpenExit);
    const bool ok_report =
        rep.is_object() && rep.contains("exit_code") && rep["exit_code"].is_number_integer();
    const bool error_report =
        !run->python && rep.is_object() && rep.contains("error") && rep["error"].is_string();
    if (!ok_report && !ended && !error_report) return;
    int64_t floor_cpu = 0, floor_rss = 0;
    if (ok_report && run->python) {
      if (ended) {
        floor_cpu = IntOr0(w->exit.value("cpu_ms", json(0)));
        floor_rss = IntOr0(w->exit.value("maxrss_kb", json(0)));
      } else {
        std::tie(floor_cpu, floor_rss) = KernelUsage(w->pid);
        if (floor_rss == 0) return;  // already exiting: its end's report (with its usage) is next
      }
    }
    json res = {{"t", "result"},
                {"id", run->spec->id},
                {"case", run->index},
                {"wall_ms", static_cast<int64_t>((Now() - run->start) * 1000)},
                {"timed_out", run->timed_out},
                {"output_limit", run->output_limit},
                {"stdout_truncated", run->truncated[0]},
                {"stderr_truncated", run->truncated[1]}};
    if (ok_report) {
      res["exit_code"] = rep["exit_code"];
      for (const char* k : {"signal", "cpu_ms", "maxrss_kb"})
        res[k] = IntOr0(rep.value(k, json(0)));
      res["cpu_ms"] = std::max(res["cpu_ms"].get<int64_t>(), floor_cpu);
      res["maxrss_kb"] = std::max(res["maxrss_kb"].get<int64_t>(), floor_rss);
      json brought = run->python ? json() : FilesOf(rep, files.size());
      if (brought.is_array())
        res["files"] = std::move(brought);
      else
        files = {};
    } else {
      for (const char* k : {"exit_code", "signal", "cpu_ms", "maxrss_kb"})
        res[k] = w->exit.is_object() ? IntOr0(w->exit.value(k, json(0))) : 0;
      files = {};
      if (error_report) {
        res["error"] = rep["error"];
        res["damaged"] = true;
      } else if (!run->python && !(run->timed_out || run->output_limit || run->killed_at >= 0)) {
        res["error"] = "worker ended without a report";
        res["damaged"] = true;
      }
    }
    res["stdout_len"] = run->out[0].size();
    res["stderr_len"] = run->out[1].size();
    std::string payload;
    payload.reserve(run->out[0].size() + run->out[1].size() + files.size());
    payload.append(run->out[0]).append(run->out[1]).append(files);
    const bool python = run->python;
    std::unique_ptr<Run> done = std::move(w->run);  // the call is over: its input goes too
    w->finished = true;
    CloseFd(&w->stdin_w);
    if (ended) {
      Discard(w);
    } else if (python && w->pidfd >= 0) {
      // W was about to _exit after its report. A program that wrote a report of its own and
      // closed its streams must not outlive its result either: the call is over.
      syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, nullptr, 0);
    }
    Send(res, payload);
    --done->batch->running;
    Feed(done->batch);  // the request's next run, if any
    DrainQueue();       // a slot is free: queued runs may start
  }

  // A native worker's files ({name, len, mode} each, their bytes after the report's header),
  // or null if they are not that or do not fit the `available` bytes.
  static json FilesOf(const json& rep, size_t available) {
    if (!rep.contains("files")) return json::array();
    const json& in = rep["files"];
    if (!in.is_array()) return nullptr;
    json out = json::array();
    uint64_t total = 0;
    for (const json& f : in) {
      if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("len") ||
          !f["len"].is_number_unsigned())
        return nullptr;
      const uint64_t len = f["len"].get<uint64_t>();
      if (len > available - total) return nullptr;
      total += len;
      const json mode = f.value("mode", json(0644));
      out.push_back({{"name", f["name"]},
                     {"len", len},
                     {"mode", mode.is_number_unsigned() ? mode : json(0644)}});
    }
    return out;
  }

  // Seconds until the next deadline, or -1 for none.
  double CheckDeadlines() {
    const double now = Now();
    double nearest = -1;
    for (auto& [pid, w] : by_pid_) {
      Run* run = w->run.get();
      if (!run) continue;
      if (run->killed_at < 0 && now >= run->deadline) {
        run->timed_out = true;
        Kill(w, false);
      } else if (run->killed_at >= 0 && now - run->killed_at >= 0.5) {
        Kill(w, true);
      }
      const double t = run->killed_at < 0 ? run->deadline : run->killed_at + 0.5;
      nearest = nearest < 0 ? t : std::min(nearest, t);
    }
    return nearest < 0 ? -1 : std::max(0.0, nearest - now);
  }

  const Config cfg_;
  const int zsock_;
  const int forker_;  // the native forker's socket (native_forker.h)
  const json hello_;
  std::map<std::string, std::string> env_;  // ours, and the zygote's
  int ep_ = -1;
  uint64_t next_token_ = 4;
  std::unordered_map<uint64_t, Watch> watches_;
  std::unordered_map<int, uint64_t> token_of_;
  std::deque<WorkerPtr> ready_[2];          // set up and waiting for a call: [0] Python, [1] native
  std::deque<WorkerPtr> forking_;           // asked of the zygote, answered in order
  std::deque<WorkerPtr> native_forking_;    // asked of the native forker, answered in order
  std::map<pid_t, WorkerPtr> by_pid_;       // until its end is seen
  std::deque<std::unique_ptr<Run>> queue_;  // waiting for a worker
  std::deque<int> free_uids_;
  int live_ = 0;  // workers made whose end has not been seen
  std::string inbuf_;
};

// The sample call the zygote runs once, in a worker of its own, before any call is here: the
// pages it writes are copied at every clone from then on (zygote_lib.c, learn_hot_pages). A
// Python call as the node sends one (its file, cwd and limits as CallService's defaults), that
// reads its stdin and prints: what most calls do besides their own work.
std::string SampleCall() {
  const std::string code = "import sys\ndata = sys.stdin.read()\nprint(len(data) + 1)\n";
  const json req = {
      {"mode", "python"},
      {"code", code},
      {"filename", "main.py"},
      {"args", json::array()},
      {"cwd", "/tmp"},
      {"limits", {{"cpu_s", 10}, {"stack_bytes", 8 << 20}, {"nproc", 64}, {"nofile", 1024}}},
      {"files", json::array({{{"name", "main.py"}, {"len", code.size()}, {"mode", 0755}}})}};
  return EncodePythonRequest(req, code);
}

// The zygote: python3 running zygote.py (sent on its stdin, then its configuration: a frame
// with the calls' seccomp filter and warren-zygote.so), with its end of a SOCK_SEQPACKET
// socket on fd 3 and /dev/null for stdout (the channel is ours alone). Returns our end of the
// socket and the zygote's first message, which says which loop serves: C, or Python's.
std::pair<int, json> StartZygote(const Config& cfg, std::string_view script, std::string_view bpf,
                                 std::string_view lib) {
  int sv[2], in[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    Die(ErrnoText("socketpair", errno));
  if (pipe2(in, O_CLOEXEC) != 0) Die(ErrnoText("pipe2", errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all;
  sigfillset(&all);
  int rc = posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  rc = rc ? rc : posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  rc = rc ? rc : posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  rc = rc ? rc : posix_spawnattr_setsigdefault(&attr, &all);
  rc = rc ? rc : posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  std::string a0 = cfg.python, a1 = "-I", a2 = "-c", a3 = kBootstrap;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  // Our environment (the calls' default) and LD_BIND_NOW: every symbol is bound in the zygote
  // once, not in each worker (zygote.py takes it out of the environment at once).
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "LD_BIND_NOW=", 12) != 0) envp.push_back(*e);
  std::string bind_now = "LD_BIND_NOW=1";
  envp.push_back(bind_now.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) Die(ErrnoText("start the zygote (" + cfg.python + ")", rc));
  close(in[0]);
  close(sv[1]);
  // zygote.py's own loop (where warren-zygote.so cannot load) follows call_setup.c's recipe
  // with its constants, sent from here so that there is one copy of them.
  json masks = json::array();
  for (size_t i = 0; i < warren_call_proc_masks_count; ++i)
    masks.push_back(warren_call_proc_masks[i]);
  json zcfg = {{"tmp_bytes", cfg.tmp_bytes},   {"tmp_inodes", WARREN_CALL_TMP_INODES},
               {"proc_masks", masks},          {"setup_flags", cfg.setup_flags},
               {"root_flags", cfg.root_flags}, {"bpf_len", bpf.size()},
               {"lib_len", lib.size()}};
  // The sample call runs as the first calls' uid: none of theirs can run before it has ended
  // (we wait for the zygote's hello, which comes after).
  const std::string sample = SampleCall();
  zcfg["probe_len"] = sample.size();
  zcfg["probe_uid"] = cfg.uid_base;
  std::string boot(4, '\0');
  const uint32_t script_len = static_cast<uint32_t>(script.size());
  memcpy(boot.data(), &script_len, 4);
  boot.append(script);
  boot += EncodeFrame(zcfg, std::string(bpf) + std::string(lib) + sample);
  if (!sys::WriteFull(in[1], boot)) Die(ErrnoText("send zygote.py to the zygote", errno));
  close(in[1]);
  char hello[4096];
  ssize_t n;
  do n = recv(sv[0], hello, sizeof hello, 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0) Die("the zygote ended before it was ready");
  json h = json::parse(std::string_view(hello, static_cast<size_t>(n)), nullptr, false);
  if (!h.is_object()) Die("an unreadable hello from the zygote");
  return {sv[0], std::move(h)};
}

}  // namespace

int CallDispatcherMain(int, char**) {
  signal(SIGPIPE, SIG_IGN);
  // The node's first frame: the configuration, then zygote.py, the calls' seccomp filter and
  // warren-zygote.so as its payload.
  Config cfg;
  int forker = -1, zsock = -1;
  json hello;
  {
    std::string head, body;
    if (!sys::ReadFull(0, 8, &head)) Die("no configuration from the node");
    uint32_t total, hlen;
    memcpy(&total, head.data(), 4);
    memcpy(&hlen, head.data() + 4, 4);
    if (total < 4 || hlen > total - 4 || !sys::ReadFull(0, total - 4, &body))
      Die("a garbled configuration frame");
    json init = json::parse(std::string_view(body).substr(0, hlen), nullptr, false);
    if (!init.is_object()) Die("an unreadable configuration");
    std::string_view rest = std::string_view(body).substr(hlen);
    auto take = [&](const char* key) {
      const size_t n = std::min<size_t>(init.value(key, size_t{0}), rest.size());
      std::string_view part = rest.substr(0, n);
      rest.remove_prefix(n);
      return part;
    };
    const std::string_view script = take("script_len"), bpf = take("bpf_len"),
                           lib = take("lib_len");
    cfg.uid_base = init.value("uid_base", cfg.uid_base);
    cfg.max_workers = std::max(1, init.value("max_workers", cfg.max_workers));
    cfg.prefork = std::max(0, init.value("prefork", cfg.prefork));
    cfg.tmp_bytes = init.value("tmp_bytes", cfg.tmp_bytes);
    cfg.artifact_limit = init.value("artifact_limit", cfg.artifact_limit);
    cfg.python = init.value("python", cfg.python);
    cfg.setup_flags = SetupFlags();
    cfg.root_flags = RootFlags();
    // Before anything of a call is here: the forker's memory is every native worker's.
    NativeForkerConfig fcfg;
    fcfg.tmp_bytes = cfg.tmp_bytes;
    fcfg.setup_flags = cfg.setup_flags;
    fcfg.root_flags = cfg.root_flags;
    fcfg.seccomp = std::string(bpf);
    std::string native_pid1;
    forker = StartNativeForker(fcfg, &native_pid1);
    if (forker < 0) Die(ErrnoText("start the native forker", errno));
    std::tie(zsock, hello) = StartZygote(cfg, script, bpf, lib);
    hello["native_pid1"] = native_pid1;
  }  // the script, filter and library are the zygote's now
  Dispatcher(std::move(cfg), zsock, forker, std::move(hello)).Loop();
}

}  // namespace warren::agent
