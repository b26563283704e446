#include "node/exec_spill.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace warren::node {
namespace {

// Frame: u8 stream, u32 kept length, u64 received length, then the kept bytes.
constexpr size_t kFrameHeader = 1 + 4 + 8;

Status WriteAll(int fd, const char* p, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", what);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status WriteMeta(const std::string& base, const nlohmann::json& meta) {
  std::string tmp = base + ".meta.tmp", dst = base + ".meta";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return ErrnoStatus("create", tmp);
  std::string s = meta.dump();
  WARREN_RETURN_IF_ERROR(WriteAll(fd.get(), s.data(), s.size(), tmp));
  if (rename(tmp.c_str(), dst.c_str()) != 0) return ErrnoStatus("rename", dst);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ExecSpill>> ExecSpill::Create(const std::string& dir, const std::string& exec_id,
                                                     const nlohmann::json& meta) {
  std::string base = dir + "/" + exec_id;
  UniqueFd out(open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus("create", base + ".out");
  WARREN_RETURN_IF_ERROR(WriteMeta(base, meta));
  std::unique_ptr<ExecSpill> s(new ExecSpill(base, std::move(out)));
  s->meta_ = meta;
  return s;
}

ExecSpill::~ExecSpill() {
  if (!remove_) return;
  out_.Reset();
  unlink((base_ + ".out").c_str());
  unlink((base_ + ".meta").c_str());
}

void ExecSpill::Append(int stream, std::string_view kept, uint64_t received) {
  char h[kFrameHeader];
  h[0] = static_cast<char>(stream);
  uint32_t n = static_cast<uint32_t>(kept.size());
  memcpy(h + 1, &n, 4);
  memcpy(h + 5, &received, 8);
  std::string frame(h, kFrameHeader);
  frame.append(kept);
  (void)WriteAll(out_.get(), frame.data(), frame.size(), base_);  // O_APPEND: one frame, one write
}

void ExecSpill::Finish(const nlohmann::json& outcome) {
  meta_["outcome"] = outcome;
  (void)WriteMeta(base_, meta_);
}

std::vector<ExecSpill::Loaded> ExecSpill::LoadDir(const std::string& dir) {
  std::vector<std::string> names;  // exec ids
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.ends_with(".meta")) names.push_back(n.substr(0, n.size() - 5));
    }
    closedir(d);
  }
  std::vector<Loaded> out;
  for (const auto& id : names) {
    std::string base = dir + "/" + id;
    std::ifstream mf(base + ".meta", std::ios::binary);
    std::stringstream ms;
    ms << mf.rdbuf();
    nlohmann::json meta = nlohmann::json::parse(ms.str(), nullptr, false);
    if (!meta.is_object() || meta.value("id", "") != id) continue;
    Loaded l;
    l.meta = meta;
    std::ifstream of(base + ".out", std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(of)), std::istreambuf_iterator<char>());
    size_t off = 0;
    while (off + kFrameHeader <= data.size()) {
      uint32_t n;
      uint64_t received;
      memcpy(&n, data.data() + off + 1, 4);
      memcpy(&received, data.data() + off + 5, 8);
      if (off + kFrameHeader + n > data.size()) break;  // a torn last frame: dropped
      l.frames.push_back({data[off], data.substr(off + kFrameHeader, n), received});
      off += kFrameHeader + n;
    }
    // Reopen for appending (a running exec goes on), cutting any torn tail.
    if (truncate((base + ".out").c_str(), static_cast<off_t>(off)) == 0) {
      UniqueFd fd(open((base + ".out").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
      if (fd) {
        l.spill.reset(new ExecSpill(base, std::move(fd)));
        l.spill->meta_ = meta;
      }
    }
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const Loaded& a, const Loaded& b) {
    return a.meta.value("started_unix", 0.0) < b.meta.value("started_unix", 0.0);
  });
  return out;
}

}  // namespace warren::node
