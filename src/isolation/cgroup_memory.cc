#include "isolation/cgroup_memory.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "isolation/cgroup_files.h"

namespace warren::isolation {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
// v1 reports an unlimited limit as a huge page-aligned number.
constexpr uint64_t kUnlimited = 1ull << 62;

uint64_t OrZero(std::optional<uint64_t> v) { return v.value_or(0); }

uint64_t Limit(std::optional<uint64_t> v) { return v && *v < kUnlimited ? *v : 0; }

Result<MemoryUse> ReadV1(const std::string& dir) {
  auto stat = ReadCgroupFile(dir + "/memory.stat");
  if (!stat.ok()) return stat.status();
  MemoryUse m;
  // The totals cover the sandbox's children (its commands cgroup) too.
  m.anon_bytes = OrZero(StatValue(*stat, "total_rss")) + OrZero(StatValue(*stat, "total_shmem"));
  m.file_bytes = OrZero(StatValue(*stat, "total_cache"));
  m.file_bytes -= std::min(m.file_bytes, OrZero(StatValue(*stat, "total_shmem")));
  m.swapped_bytes = OrZero(StatValue(*stat, "total_swap"));
  m.resident_bytes = OrZero(ReadCgroupNumber(dir + "/memory.usage_in_bytes"));
  m.limit_bytes = Limit(ReadCgroupNumber(dir + "/memory.limit_in_bytes"));
  return m;
}

Result<MemoryUse> ReadV2(const std::string& dir) {
  auto stat = ReadCgroupFile(dir + "/memory.stat");
  if (!stat.ok()) return stat.status();
  MemoryUse m;
  m.anon_bytes = OrZero(StatValue(*stat, "anon")) + OrZero(StatValue(*stat, "shmem"));
  m.file_bytes = OrZero(StatValue(*stat, "file"));
  m.file_bytes -= std::min(m.file_bytes, OrZero(StatValue(*stat, "shmem")));
  m.swapped_bytes = OrZero(ReadCgroupNumber(dir + "/memory.swap.current"));
  m.resident_bytes = OrZero(ReadCgroupNumber(dir + "/memory.current"));
  m.limit_bytes = Limit(ReadCgroupNumber(dir + "/memory.max"));
  return m;
}

void AppendPids(const std::string& file, std::vector<pid_t>* out) {
  FILE* f = fopen(file.c_str(), "re");
  if (!f) return;
  int pid;
  while (fscanf(f, "%d", &pid) == 1) out->push_back(pid);
  fclose(f);
}

Status MkdirIfMissing(const std::string& p) {
  if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", p);
  return Status::Ok();
}

}  // namespace

CgroupPaths PathsOf(const std::string& parent_name, const std::string& name) {
  const CgroupLayout& l = GetCgroupLayout();
  CgroupPaths p;
  if (const std::string mem = l.v1_memory(); !mem.empty()) {
    p.memory_dir = mem + "/" + parent_name + "/" + name;
    if (PathExists(p.memory_dir + "/commands")) p.commands_dir = p.memory_dir + "/commands";
  }
  if (!l.v2_root.empty()) p.v2_dir = l.v2_root + "/" + parent_name + "/" + name;
  return p;
}

Result<MemoryUse> ReadMemoryUse(const CgroupPaths& p) {
  if (!p.memory_dir.empty()) return ReadV1(p.memory_dir);
  if (GetCgroupLayout().pure_v2 && !p.v2_dir.empty()) return ReadV2(p.v2_dir);
  return Status(Code::kUnavailable, "read memory use", "sandbox", "no memory cgroup");
}

Result<uint64_t> ReadCpuUsec(const CgroupPaths& p) {
  if (p.v2_dir.empty())
    return Status(Code::kUnavailable, "read cpu use", "sandbox", "no cgroup2 directory");
  auto stat = ReadCgroupFile(p.v2_dir + "/cpu.stat");
  if (!stat.ok()) return stat.status();
  auto usec = StatValue(*stat, "usage_usec");
  if (!usec) return Status(Code::kInternal, "read cpu use", p.v2_dir, "no usage_usec");
  return *usec;
}

double ReadMemoryPressure(const CgroupPaths& p) {
  if (p.v2_dir.empty()) return 0;
  auto text = ReadCgroupFile(p.v2_dir + "/memory.pressure");
  if (!text.ok()) return 0;
  // "some avg10=0.00 avg60=0.00 avg300=0.00 total=0"
  const size_t at = text->find("some avg10=");
  if (at == std::string::npos) return 0;
  return std::strtod(text->c_str() + at + 11, nullptr);
}

std::vector<pid_t> ListPids(const CgroupPaths& p) {
  std::vector<pid_t> pids;
  if (!p.v2_dir.empty()) {
    AppendPids(p.v2_dir + "/cgroup.procs", &pids);
    return pids;
  }
  if (!p.memory_dir.empty()) AppendPids(p.memory_dir + "/cgroup.procs", &pids);
  if (!p.commands_dir.empty()) AppendPids(p.commands_dir + "/cgroup.procs", &pids);
  return pids;
}

Status SetSwapAllowed(const CgroupPaths& p, bool allowed) {
  if (!p.memory_dir.empty()) {
    const std::string v = allowed ? "100" : "0";
    WARREN_RETURN_IF_ERROR(WriteCgroupFile(p.memory_dir + "/memory.swappiness", v));
    if (!p.commands_dir.empty())
      WARREN_RETURN_IF_ERROR(WriteCgroupFile(p.commands_dir + "/memory.swappiness", v));
    return Status::Ok();
  }
  if (GetCgroupLayout().pure_v2 && PathExists(p.v2_dir + "/memory.swap.max")) {
    const uint64_t limit = Limit(ReadCgroupNumber(p.v2_dir + "/memory.max"));
    const std::string v = !allowed ? "0" : limit ? std::to_string(limit) : "max";
    return WriteCgroupFile(p.v2_dir + "/memory.swap.max", v);
  }
  return Status::Ok();
}

Result<ReclaimResult> ReclaimTo(const CgroupPaths& p, uint64_t target) {
  ReclaimResult r;
  if (p.memory_dir.empty()) {
    if (!GetCgroupLayout().pure_v2 || p.v2_dir.empty())
      return Status(Code::kUnavailable, "reclaim", "sandbox", "no memory cgroup");
    const std::string dir = p.v2_dir;
    r.before_bytes = OrZero(ReadCgroupNumber(dir + "/memory.current"));
    if (r.before_bytes > target) {
      // EAGAIN: less than asked could go, which is no error here.
      Status st = WriteCgroupFile(dir + "/memory.reclaim", std::to_string(r.before_bytes - target));
      if (!st.ok() && st.err() != EAGAIN) return st;
      r.steps = 1;
    }
    r.after_bytes = OrZero(ReadCgroupNumber(dir + "/memory.current"));
    return r;
  }
  const std::string usage_file = p.memory_dir + "/memory.usage_in_bytes";
  const std::string limit_file = p.memory_dir + "/memory.limit_in_bytes";
  auto limit = ReadCgroupNumber(limit_file);
  if (!limit) return ErrnoStatus("read", limit_file);
  r.before_bytes = OrZero(ReadCgroupNumber(usage_file));
  uint64_t cur = r.before_bytes;
  Status failed;
  // A quarter of what is left to go per step (at least 4 MiB): each write reclaims before
  // it returns, and small steps let the sandbox's own allocations in between.
  while (cur > target + kMiB && r.steps < 64) {
    const uint64_t step = std::max<uint64_t>(4 * kMiB, (cur - target) / 4);
    const uint64_t next = cur - std::min(step, cur - target);
    Status st = WriteCgroupFile(limit_file, std::to_string(next));
    ++r.steps;
    if (!st.ok()) {
      if (st.err() != EBUSY) failed = st;  // EBUSY: nothing more can go now
      break;
    }
    const uint64_t now = OrZero(ReadCgroupNumber(usage_file));
    if (now >= cur) break;
    cur = now;
  }
  // Back to its limit: the sandbox may use what it asked for again.
  Status restored = WriteCgroupFile(limit_file, std::to_string(*limit));
  if (!restored.ok()) return restored.Context("restore the memory limit");
  if (!failed.ok()) return failed;
  r.after_bytes = OrZero(ReadCgroupNumber(usage_file));
  return r;
}

Result<MemoryUse> ReadParentMemoryUse(const std::string& parent_name) {
  const CgroupLayout& l = GetCgroupLayout();
  if (const std::string mem = l.v1_memory(); !mem.empty()) return ReadV1(mem + "/" + parent_name);
  if (l.pure_v2) return ReadV2(l.v2_root + "/" + parent_name);
  return Status(Code::kUnavailable, "read memory use", parent_name, "no memory cgroup");
}

Result<uint64_t> ReadParentResidentBytes(const std::string& parent_name) {
  const CgroupLayout& l = GetCgroupLayout();
  std::string file;
  if (const std::string mem = l.v1_memory(); !mem.empty())
    file = mem + "/" + parent_name + "/memory.usage_in_bytes";
  else if (l.pure_v2)
    file = l.v2_root + "/" + parent_name + "/memory.current";
  else
    return Status(Code::kUnavailable, "read memory use", parent_name, "no memory cgroup");
  auto n = ReadCgroupNumber(file);
  if (!n) return Status(Code::kUnavailable, "read memory use", parent_name, "no usage counter");
  return *n;
}

Status SetParentMemoryLimit(const std::string& parent_name, uint64_t bytes) {
  const CgroupLayout& l = GetCgroupLayout();
  const std::string v = bytes ? std::to_string(bytes) : "-1";
  if (const std::string mem = l.v1_memory(); !mem.empty()) {
    const std::string dir = mem + "/" + parent_name;
    WARREN_RETURN_IF_ERROR(MkdirIfMissing(dir));
    return WriteCgroupFile(dir + "/memory.limit_in_bytes", v);
  }
  if (l.pure_v2) {
    const std::string dir = l.v2_root + "/" + parent_name;
    WARREN_RETURN_IF_ERROR(MkdirIfMissing(dir));
    return WriteCgroupFile(dir + "/memory.max", bytes ? v : "max");
  }
  return Status(Code::kUnavailable, "set node memory budget", parent_name, "no memory cgroup");
}

}  // namespace warren::isolation
