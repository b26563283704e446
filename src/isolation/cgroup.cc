#include "isolation/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "isolation/cgroup_files.h"

namespace warren::isolation {
namespace {

constexpr const char* kRoot = kCgroupRoot;
// Memory the agent may use beyond the commands' limit (its own pages, files written through
// the file API).
constexpr uint64_t kAgentHeadroomBytes = 32ull << 20;

using Layout = CgroupLayout;
const Layout& GetLayout() { return GetCgroupLayout(); }
bool Exists(const std::string& p) { return PathExists(p); }
Status WriteFile(const std::string& path, const std::string& data) {
  return WriteCgroupFile(path, data);
}

Status MkdirIfMissing(const std::string& p) {
  if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", p);
  return Status::Ok();
}

// Enables the controllers for children of `dir` (pure v2 only).
void EnableControllers(const std::string& dir) {
  for (const char* c : {"+memory", "+pids", "+cpu"})
    (void)WriteFile(dir + "/cgroup.subtree_control", c);
}

// Memory cgroups of finished sandboxes, kept for the next ones (cgroup v1 only, where a
// directory can be renamed). A memory cgroup is the most expensive kernel object of a
// sandbox: creating one sizes its shrinker map by every superblock on the host (about 1 KiB per
// 64), and removing one walks the LRU lists of every superblock under the cgroup lock (at
// 5,000 sandboxes, 20 ms of a CPU per delete, with every other cgroup operation waiting). An
// idle one is renamed `idle-N` and reused by the next create under its new name.
constexpr size_t kMaxIdleMemcgs = 256;
std::mutex idle_mu;
std::map<std::string, std::vector<std::string>> idle_memcgs;  // memory parent dir -> idle names
uint64_t idle_counter = 0;

// An idle memory cgroup of `parent` renamed to `name` (with its commands child), or false.
bool ReuseIdleMemcg(const std::string& parent, const std::string& name) {
  for (;;) {
    std::string idle;
    {
      std::lock_guard lock(idle_mu);
      auto& v = idle_memcgs[parent];
      if (v.empty()) return false;
      idle = v.back();
      v.pop_back();
    }
    if (rename((parent + "/" + idle).c_str(), (parent + "/" + name).c_str()) == 0) return true;
    // Gone or unusable: forget it and try the next.
    rmdir((parent + "/" + idle + "/commands").c_str());
    rmdir((parent + "/" + idle).c_str());
  }
}

// What an idle memory cgroup may still be charged and be reused. v1 leaves a cgroup's
// charges with it when its processes leave or die: clean page cache its sandbox read first
// (reclaimable), but also the memory of a process that moved on (a warm microVM's QEMU after
// its hand-over). A cgroup holding more is removed as before, its charges going to the parent.
constexpr uint64_t kMaxIdleCharge = 8ull << 20;

// Keeps `dir` (a memory cgroup with no process left) for reuse; false if the pool is full or
// the cgroup is still charged too much.
bool KeepIdleMemcg(const std::string& dir) {
  uint64_t usage = ~uint64_t{0};
  if (FILE* f = fopen((dir + "/memory.usage_in_bytes").c_str(), "re")) {
    if (fscanf(f, "%lu", &usage) != 1) usage = ~uint64_t{0};
    fclose(f);
  }
  if (usage > kMaxIdleCharge) return false;
  const size_t slash = dir.rfind('/');
  const std::string parent = dir.substr(0, slash);
  std::string idle;
  {
    std::lock_guard lock(idle_mu);
    if (idle_memcgs[parent].size() >= kMaxIdleMemcgs) return false;
    idle = "idle-" + std::to_string(++idle_counter);
  }
  if (rename(dir.c_str(), (parent + "/" + idle).c_str()) != 0) return false;
  std::lock_guard lock(idle_mu);
  idle_memcgs[parent].push_back(idle);
  return true;
}

std::string CpuQuota(double cpus, uint64_t period) {
  return std::to_string(static_cast<uint64_t>(std::ceil(cpus * static_cast<double>(period))));
}

}  // namespace

std::string CgroupLayoutName() {
  const Layout& l = GetLayout();
  if (l.pure_v2) return "v2";
  return std::string("hybrid (v1 limits") + (l.v2_root.empty() ? ")" : ", v2 kill/freeze)");
}

Result<Cgroup> Cgroup::Create(const std::string& parent_name, const std::string& name,
                              const CgroupLimits& lim) {
  const Layout& l = GetLayout();
  Cgroup cg;
  for (const std::string& root : l.v1_roots) {
    std::string parent = root + "/" + parent_name;
    WARREN_RETURN_IF_ERROR(MkdirIfMissing(parent));
    std::string dir = parent + "/" + name;
    if (root.ends_with("/memory") && lim.memory_bytes && ReuseIdleMemcg(parent, name)) {
      cg.dirs_.push_back(dir);
      cg.commands_dir_ = dir + "/commands";
      // Its high-water marks were the last sandbox's.
      (void)WriteFile(dir + "/memory.max_usage_in_bytes", "0");
      (void)WriteFile(cg.commands_dir_ + "/memory.max_usage_in_bytes", "0");
      continue;
    }
    if (mkdir(dir.c_str(), 0755) != 0) return ErrnoStatus("mkdir cgroup", dir);
    cg.dirs_.push_back(dir);  // from here on the destructor removes it
    if (root.ends_with("/memory") && lim.memory_bytes) {
      // The agent lives in DIR with a little headroom; the commands live in DIR/commands
      // with the sandbox's limit. An OOM the commands cause picks its victim among them
      // only, so the agent survives whatever they do (it cannot be protected by
      // oom_score_adj on hosts where root lacks CAP_SYS_RESOURCE).
      std::string cmds = dir + "/commands";
      if (mkdir(cmds.c_str(), 0755) != 0) return ErrnoStatus("mkdir cgroup", cmds);
      cg.commands_dir_ = cmds;
    }
  }
  if (!l.v2_root.empty()) {
    std::string parent = l.v2_root + "/" + parent_name;
    WARREN_RETURN_IF_ERROR(MkdirIfMissing(parent));
    if (l.pure_v2) {
      EnableControllers(l.v2_root);
      EnableControllers(parent);
    }
    std::string dir = parent + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) return ErrnoStatus("mkdir cgroup", dir);
    cg.v2_dir_ = dir;
    cg.v2_fd_.Reset(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!cg.v2_fd_) return ErrnoStatus("open cgroup", dir);
  }
  WARREN_RETURN_IF_ERROR(cg.SetLimits(lim));
  return cg;
}

namespace {

// A v1 memory limit with swap forbidden on top (memsw = memory, where swap accounting
// exists). v1 refuses memory > memsw, so the order depends on the direction.
Status SetV1Memory(const std::string& d, uint64_t bytes) {
  const std::string v = std::to_string(bytes), mem = d + "/memory.limit_in_bytes",
                    memsw = d + "/memory.memsw.limit_in_bytes";
  if (!Exists(memsw)) return WriteFile(mem, v);
  uint64_t current = 0;
  if (FILE* f = fopen(mem.c_str(), "re")) {
    if (fscanf(f, "%lu", &current) != 1) current = 0;
    fclose(f);
  }
  if (bytes > current) {
    WARREN_RETURN_IF_ERROR(WriteFile(memsw, v));
    return WriteFile(mem, v);
  }
  WARREN_RETURN_IF_ERROR(WriteFile(mem, v));
  return WriteFile(memsw, v);
}

}  // namespace

Status Cgroup::SetLimits(const CgroupLimits& lim) {
  // Each write takes the kernel's cgroup lock, contended while other sandboxes are made.
  if (limits_ && limits_->memory_bytes == lim.memory_bytes && limits_->pids == lim.pids &&
      limits_->cpus == lim.cpus)
    return Status::Ok();
  limits_.reset();
  const Layout& l = GetLayout();
  for (const std::string& dir : dirs_) {
    if (dir.starts_with(l.v2_root + "/") && !l.v2_root.empty()) continue;
    if (dir.starts_with(std::string(kRoot) + "/memory/") && lim.memory_bytes) {
      WARREN_RETURN_IF_ERROR(SetV1Memory(dir, lim.memory_bytes + kAgentHeadroomBytes));
      if (!commands_dir_.empty())
        WARREN_RETURN_IF_ERROR(SetV1Memory(commands_dir_, lim.memory_bytes));
    } else if (dir.starts_with(std::string(kRoot) + "/pids/") && lim.pids) {
      WARREN_RETURN_IF_ERROR(WriteFile(dir + "/pids.max", std::to_string(lim.pids)));
    } else if (dir.starts_with(std::string(kRoot) + "/cpu/") && lim.cpus > 0) {
      WARREN_RETURN_IF_ERROR(WriteFile(dir + "/cpu.cfs_period_us", "100000"));
      WARREN_RETURN_IF_ERROR(WriteFile(dir + "/cpu.cfs_quota_us", CpuQuota(lim.cpus, 100000)));
    }
  }
  if (l.pure_v2 && !v2_dir_.empty()) {
    const std::string& dir = v2_dir_;
    if (lim.memory_bytes) {
      WARREN_RETURN_IF_ERROR(WriteFile(dir + "/memory.max", std::to_string(lim.memory_bytes)));
      if (Exists(dir + "/memory.swap.max"))
        WARREN_RETURN_IF_ERROR(WriteFile(dir + "/memory.swap.max", "0"));
    }
    if (lim.pids) WARREN_RETURN_IF_ERROR(WriteFile(dir + "/pids.max", std::to_string(lim.pids)));
    if (lim.cpus > 0)
      WARREN_RETURN_IF_ERROR(WriteFile(dir + "/cpu.max", CpuQuota(lim.cpus, 100000) + " 100000"));
  }
  limits_ = lim;
  return Status::Ok();
}

Result<Cgroup> Cgroup::Open(const std::string& parent_name, const std::string& name) {
  const Layout& l = GetLayout();
  Cgroup cg;
  for (const std::string& root : l.v1_roots) {
    std::string dir = root + "/" + parent_name + "/" + name;
    if (!Exists(dir)) return NotFound("cgroup", dir);
    cg.dirs_.push_back(dir);
    if (root.ends_with("/memory") && Exists(dir + "/commands"))
      cg.commands_dir_ = dir + "/commands";
  }
  if (!l.v2_root.empty()) {
    std::string dir = l.v2_root + "/" + parent_name + "/" + name;
    if (!Exists(dir)) return NotFound("cgroup", dir);
    cg.v2_dir_ = dir;
  }
  return cg;
}

bool Cgroup::Holds(pid_t pid) const {
  if (v2_dir_.empty()) return false;
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/cgroup").c_str(), "re");
  if (!f) return false;
  const Layout& l = GetLayout();
  std::string want = v2_dir_.substr(l.v2_root.size());  // "/PARENT/NAME"
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof line, f)) {
    std::string s = line;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    if (s.rfind("0::", 0) == 0 && s.substr(3) == want) found = true;
  }
  fclose(f);
  return found;
}

int ReapStaleCgroups(const std::string& parent_name, const std::set<std::string>& keep) {
  const Layout& l = GetLayout();
  std::vector<std::string> parents;
  for (const auto& r : l.v1_roots) parents.push_back(r + "/" + parent_name);
  if (!l.v2_root.empty()) parents.push_back(l.v2_root + "/" + parent_name);
  std::set<std::string> names;
  for (const auto& p : parents) {
    DIR* d = opendir(p.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') names.insert(e->d_name);
    closedir(d);
  }
  for (const auto& name : names) {
    if (keep.count(name)) continue;
    // Kill until empty: SIGKILL of each listed pid, cgroup.kill where there is one.
    for (int round = 0; round < 50; ++round) {
      bool any = false;
      for (const auto& p : parents) {
        // The sandbox's directory and its nested commands cgroup (v1 memory): v1 lists only
        // a directory's own members.
        for (const std::string& dir : {p + "/" + name + "/commands", p + "/" + name}) {
          if (Exists(dir + "/cgroup.kill")) (void)WriteFile(dir + "/cgroup.kill", "1");
          FILE* f = fopen((dir + "/cgroup.procs").c_str(), "r");
          if (!f) continue;
          int pid;
          while (fscanf(f, "%d", &pid) == 1) {
            any = true;
            kill(pid, SIGKILL);
          }
          fclose(f);
        }
      }
      if (!any) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (const auto& p : parents) {
      rmdir((p + "/" + name + "/commands").c_str());
      rmdir((p + "/" + name).c_str());
    }
  }
  return static_cast<int>(names.size());
}

void RemoveCgroupParent(const std::string& parent_name) {
  const Layout& l = GetLayout();
  for (const auto& r : l.v1_roots) {
    const std::string parent = r + "/" + parent_name;
    std::vector<std::string> idle;
    {
      std::lock_guard lock(idle_mu);
      idle.swap(idle_memcgs[parent]);
    }
    for (const auto& n : idle) {
      rmdir((parent + "/" + n + "/commands").c_str());
      rmdir((parent + "/" + n).c_str());
    }
  }
  for (const auto& r : l.v1_roots) rmdir((r + "/" + parent_name).c_str());
  if (!l.v2_root.empty()) rmdir((l.v2_root + "/" + parent_name).c_str());
}

CgroupPaths Cgroup::paths() const {
  CgroupPaths p;
  for (const std::string& dir : dirs_)
    if (dir.starts_with(std::string(kRoot) + "/memory/")) p.memory_dir = dir;
  p.commands_dir = commands_dir_;
  p.v2_dir = v2_dir_;
  return p;
}

Status Cgroup::AttachV1(pid_t pid) {
  for (const std::string& dir : dirs_)
    WARREN_RETURN_IF_ERROR(WriteFile(dir + "/cgroup.procs", std::to_string(pid)));
  return Status::Ok();
}

Status Cgroup::Enter(pid_t pid) {
  WARREN_RETURN_IF_ERROR(AttachV1(pid));
  if (!v2_dir_.empty())
    WARREN_RETURN_IF_ERROR(WriteFile(v2_dir_ + "/cgroup.procs", std::to_string(pid)));
  return Status::Ok();
}

Status Cgroup::Kill() {
  if (v2_dir_.empty() || !Exists(v2_dir_ + "/cgroup.kill")) return Status::Ok();
  return WriteFile(v2_dir_ + "/cgroup.kill", "1");
}

Status Cgroup::Freeze(bool frozen) {
  if (v2_dir_.empty() || !Exists(v2_dir_ + "/cgroup.freeze"))
    return Status(Code::kUnavailable, "freeze", v2_dir_, "this host has no cgroup2 freezer");
  WARREN_RETURN_IF_ERROR(WriteFile(v2_dir_ + "/cgroup.freeze", frozen ? "1" : "0"));
  // cgroup.events says "frozen 1" once every task has stopped; thawing is immediate.
  for (int i = 0; frozen && i < 500; ++i) {
    FILE* f = fopen((v2_dir_ + "/cgroup.events").c_str(), "r");
    if (!f) return ErrnoStatus("open", v2_dir_ + "/cgroup.events");
    char line[64];
    bool done = false;
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "frozen 1", 8) == 0) done = true;
    fclose(f);
    if (done) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (frozen) {
    // Not left half frozen: a later reader of cgroup.freeze would take it for a pause.
    (void)WriteFile(v2_dir_ + "/cgroup.freeze", "0");
    return Status(Code::kUnavailable, "freeze", v2_dir_, "tasks did not stop in 1 s");
  }
  return Status::Ok();
}

bool Cgroup::Frozen() const {
  if (v2_dir_.empty()) return false;
  FILE* f = fopen((v2_dir_ + "/cgroup.freeze").c_str(), "re");
  if (!f) return false;
  int v = 0;
  const bool frozen = fscanf(f, "%d", &v) == 1 && v == 1;
  fclose(f);
  return frozen;
}

Result<UniqueFd> Cgroup::OpenCommandsProcs() const {
  if (commands_dir_.empty()) return UniqueFd();
  std::string p = commands_dir_ + "/cgroup.procs";
  UniqueFd fd(open(p.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", p);
  return fd;
}

Status Cgroup::Destroy() {
  v2_fd_.Reset();
  std::vector<std::string> all;
  for (const std::string& dir : dirs_) {
    // A memory cgroup with its commands child goes to the idle pool instead (see above).
    if (!commands_dir_.empty() && dir.starts_with(std::string(kRoot) + "/memory/") &&
        commands_dir_ == dir + "/commands" && KeepIdleMemcg(dir))
      continue;
    if (dir + "/commands" == commands_dir_)
      all.push_back(commands_dir_);  // children before parents
    all.push_back(dir);
  }
  if (!v2_dir_.empty()) all.push_back(v2_dir_);
  Status result;
  for (const std::string& dir : all) {
    int tries = 0;
    while (rmdir(dir.c_str()) != 0) {
      if (errno == ENOENT) break;
      if (errno != EBUSY || ++tries > 200) {
        result = ErrnoStatus("rmdir cgroup", dir);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  dirs_.clear();
  commands_dir_.clear();
  v2_dir_.clear();
  return result;
}

}  // namespace warren::isolation
