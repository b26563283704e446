#include "isolation/zram_swap.h"

#include <sys/swap.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/subprocess.h"
#include "isolation/cgroup_files.h"

namespace warren::isolation {
namespace {

constexpr const char* kSysBlock = "/sys/block/zram";
// Above any swap the host set up itself (priorities are -2 and down unless set).
constexpr int kPriority = 100;

std::string SysDir(int index) { return kSysBlock + std::to_string(index); }

// Whether `device` is an active swap (/proc/swaps).
bool IsSwap(const std::string& device) {
  std::ifstream in("/proc/swaps");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(device + " ", 0) == 0 || line.rfind(device + "\t", 0) == 0) return true;
  return false;
}

}  // namespace

ZramSwap& ZramSwap::operator=(ZramSwap&& o) noexcept {
  if (this != &o) {
    (void)Release();
    index_ = std::exchange(o.index_, -1);
    device_ = std::move(o.device_);
    state_file_ = std::move(o.state_file_);
  }
  return *this;
}

Result<ZramSwap> ZramSwap::Create(uint64_t bytes, const std::string& state_file) {
  auto added = ReadCgroupNumber("/sys/class/zram-control/hot_add");
  if (!added)
    return Status(Code::kUnavailable, "add zram device", "zram-control",
                  "this kernel offers no zram (hot_add)");
  ZramSwap z;
  z.index_ = static_cast<int>(*added);  // from here on Release removes it
  z.device_ = "/dev/zram" + std::to_string(z.index_);
  z.state_file_ = state_file;
  const std::string sys = SysDir(z.index_);
  // lz4 compresses a little less than lzo-rle and decompresses about twice as fast: a woken
  // sandbox waits on decompression.
  if (auto algos = ReadCgroupFile(sys + "/comp_algorithm");
      algos.ok() && algos->find("lz4") != std::string::npos)
    (void)WriteCgroupFile(sys + "/comp_algorithm", "lz4");
  WARREN_RETURN_IF_ERROR(WriteCgroupFile(sys + "/disksize", std::to_string(bytes)));
  auto mk = WARREN_TRY(RunProgram({"mkswap", "-q", z.device_}));
  if (mk.exit_code != 0) return Status(Code::kInternal, "mkswap", z.device_, mk.output);
  const int flags = SWAP_FLAG_PREFER | SWAP_FLAG_DISCARD |
                    ((kPriority << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK);
  if (swapon(z.device_.c_str(), flags) != 0) return ErrnoStatus("swapon", z.device_);
  std::ofstream out(state_file, std::ios::trunc);
  out << z.device_ << "\n";
  if (!out.flush()) return ErrnoStatus("write", state_file);
  return z;
}

Result<ZramSwap> ZramSwap::Adopt(const std::string& state_file) {
  std::ifstream in(state_file);
  std::string device;
  if (!in || !std::getline(in, device) || !device.starts_with("/dev/zram"))
    return NotFound("swap record", state_file);
  if (!IsSwap(device)) {
    unlink(state_file.c_str());
    return NotFound("swap device", device);
  }
  ZramSwap z;
  z.index_ = std::atoi(device.c_str() + strlen("/dev/zram"));
  z.device_ = device;
  z.state_file_ = state_file;
  return z;
}

Status ZramSwap::Release() {
  if (index_ < 0) return Status::Ok();
  Status st;
  if (IsSwap(device_) && swapoff(device_.c_str()) != 0) st = ErrnoStatus("swapoff", device_);
  if (st.ok()) {
    (void)WriteCgroupFile(SysDir(index_) + "/reset", "1");
    Status removed = WriteCgroupFile("/sys/class/zram-control/hot_remove", std::to_string(index_));
    if (!removed.ok()) st = removed;
    if (!state_file_.empty()) unlink(state_file_.c_str());
  }
  index_ = -1;
  return st;
}

SwapStats ZramSwap::Stats() const {
  SwapStats s;
  if (index_ < 0) return s;
  const std::string sys = SysDir(index_);
  s.size_bytes = ReadCgroupNumber(sys + "/disksize").value_or(0);
  // mm_stat: orig_data_size compr_data_size mem_used_total ...
  if (auto mm = ReadCgroupFile(sys + "/mm_stat"); mm.ok()) {
    std::istringstream in(*mm);
    in >> s.used_bytes >> s.compressed_bytes >> s.ram_bytes;
  }
  return s;
}

SwapStats HostSwapStats() {
  SwapStats s;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0, total = 0, free = 0;
  while (in >> key >> kib) {
    if (key == "SwapTotal:") total = kib << 10;
    if (key == "SwapFree:") free = kib << 10;
    in.ignore(64, '\n');
  }
  s.size_bytes = total;
  s.used_bytes = total - std::min(total, free);
  return s;
}

}  // namespace warren::isolation
