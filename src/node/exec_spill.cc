#include "node/exec_spill.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace warren::node {
namespace {

// Record: u8 type, u32 handle, u32 payload length, then the payload.
// Frame payload: u8 stream, u64 received length, then the kept bytes.
constexpr size_t kRecordHeader = 1 + 4 + 4;
constexpr size_t kFrameHeader = 1 + 8;
// Compaction once forgotten records are at least this big and half the file.
constexpr uint64_t kCompactMinDead = 1 << 20;

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

std::string Record(uint8_t type, uint32_t handle, std::string_view a, std::string_view b) {
  std::string r(kRecordHeader, '\0');
  r[0] = static_cast<char>(type);
  uint32_t len = static_cast<uint32_t>(a.size() + b.size());
  memcpy(r.data() + 1, &handle, 4);
  memcpy(r.data() + 5, &len, 4);
  r.append(a);
  r.append(b);
  return r;
}

struct Parsed {
  uint8_t type;
  uint32_t handle;
  std::string_view payload;
  std::string_view whole;
};

// Calls f for every whole record of `data`; returns the length of the well-formed prefix.
template <typename F>
size_t ForEachRecord(std::string_view data, F f) {
  size_t off = 0;
  while (off + kRecordHeader <= data.size()) {
    Parsed p;
    p.type = static_cast<uint8_t>(data[off]);
    uint32_t len;
    memcpy(&p.handle, data.data() + off + 1, 4);
    memcpy(&len, data.data() + off + 5, 4);
    if (p.type < 1 || p.type > 4 || len > data.size() - off - kRecordHeader) break;  // torn
    p.payload = data.substr(off + kRecordHeader, len);
    p.whole = data.substr(off, kRecordHeader + len);
    f(p);
    off += kRecordHeader + len;
  }
  return off;
}

Result<std::string> ReadAll(int fd, uint64_t size, const std::string& what) {
  std::string data(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, data.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read", what);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace

ExecSpill::~ExecSpill() {
  if (remove_) journal_->Forget(handle_);
}

void ExecSpill::Append(int stream, std::string_view kept, uint64_t received) {
  char h[kFrameHeader];
  h[0] = static_cast<char>(stream);
  memcpy(h + 1, &received, 8);
  journal_->Write(ExecJournal::kFrame, handle_, std::string_view(h, kFrameHeader), kept);
}

void ExecSpill::Finish(const nlohmann::json& outcome) {
  journal_->Write(ExecJournal::kOutcome, handle_, outcome.dump());
}

Status ExecJournal::OpenLocked() {
  if (fd_) return Status::Ok();
  fd_ = UniqueFd(open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd_) return ErrnoStatus("create", path_);
  struct stat st;
  if (fstat(fd_.get(), &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Result<std::unique_ptr<ExecSpill>> ExecJournal::Begin(const nlohmann::json& meta) {
  uint32_t handle;
  {
    std::lock_guard lock(mu_);
    if (discarded_) return Status(Code::kNotFound, "journal exec", path_, "the sandbox is gone");
    WARREN_RETURN_IF_ERROR(OpenLocked());
    handle = next_handle_++;
    live_[handle] = 0;
  }
  Write(kMeta, handle, meta.dump());
  return std::unique_ptr<ExecSpill>(new ExecSpill(shared_from_this(), handle));
}

void ExecJournal::Write(Type type, uint32_t handle, std::string_view a, std::string_view b) {
  std::string r = Record(type, handle, a, b);
  std::lock_guard lock(mu_);
  if (!fd_) return;
  Status st = WriteAll(fd_.get(), r.data(), r.size(), path_);
  if (!st.ok()) {
    // Keep the file whole: a torn record in the middle would hide every later one.
    if (ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
      spdlog::warn("exec journal: {}; not journaling this sandbox's execs any more", st.ToString());
      fd_.Reset();
    } else if (!failed_) {
      spdlog::warn("exec journal: {} (this record will not survive a daemon restart)",
                   st.ToString());
    }
    failed_ = true;
    return;
  }
  size_ += r.size();
  auto it = live_.find(handle);
  if (it != live_.end())
    it->second += r.size();
  else
    dead_ += r.size();
}

void ExecJournal::Forget(uint32_t handle) {
  std::string r = Record(kForget, handle, {}, {});
  std::lock_guard lock(mu_);
  auto it = live_.find(handle);
  if (it == live_.end() || !fd_) return;
  if (!WriteAll(fd_.get(), r.data(), r.size(), path_).ok()) {
    (void)ftruncate(fd_.get(), static_cast<off_t>(size_));
    return;  // still live on disk: it comes back after a restart and is forgotten again
  }
  size_ += r.size();
  dead_ += it->second + r.size();
  live_.erase(it);
  if (dead_ >= kCompactMinDead && dead_ * 2 >= size_) {
    Status st = CompactLocked();
    if (!st.ok()) spdlog::warn("exec journal: {}", st.ToString());
  }
}

Status ExecJournal::CompactLocked() {
  UniqueFd rd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!rd) return ErrnoStatus("open", path_);
  std::string data = WARREN_TRY(ReadAll(rd.get(), size_, path_));
  std::string keep;
  keep.reserve(static_cast<size_t>(size_ - std::min(size_, dead_)));
  ForEachRecord(data, [&](const Parsed& p) {
    if (p.type != kForget && live_.count(p.handle)) keep.append(p.whole);
  });
  const std::string tmp = path_ + ".tmp";
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus("create", tmp);
  Status st = WriteAll(out.get(), keep.data(), keep.size(), tmp);
  if (st.ok() && rename(tmp.c_str(), path_.c_str()) != 0) st = ErrnoStatus("rename", path_);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st.Context("compact exec journal");
  }
  fd_ = std::move(out);
  size_ = keep.size();
  dead_ = 0;
  return Status::Ok();
}

void ExecJournal::Discard() {
  std::lock_guard lock(mu_);
  discarded_ = true;
  fd_.Reset();
  live_.clear();
  unlink(path_.c_str());
}

uint64_t ExecJournal::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

std::shared_ptr<ExecJournal> ExecJournal::Load(const std::string& path,
                                               std::vector<ExecSpill::Loaded>* execs) {
  auto j = std::make_shared<ExecJournal>(path);
  UniqueFd rd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!rd) return j;  // never ran an exec
  struct stat st;
  if (fstat(rd.get(), &st) != 0) return j;
  auto data = ReadAll(rd.get(), static_cast<uint64_t>(st.st_size), path);
  if (!data.ok()) {
    spdlog::warn("exec journal: {}", data.status().ToString());
    return j;
  }
  std::map<uint32_t, ExecSpill::Loaded> found;  // by handle: the order they began in
  std::lock_guard lock(j->mu_);
  const size_t good = ForEachRecord(*data, [&](const Parsed& p) {
    j->next_handle_ = std::max(j->next_handle_, p.handle + 1);
    j->size_ += p.whole.size();
    auto it = found.find(p.handle);
    if (p.type == kMeta) {
      nlohmann::json meta = nlohmann::json::parse(p.payload, nullptr, false);
      if (it == found.end() && meta.is_object() && !meta.value("id", "").empty()) {
        found[p.handle].meta = std::move(meta);
        j->live_[p.handle] = p.whole.size();
        return;
      }
    } else if (it != found.end()) {
      j->live_[p.handle] += p.whole.size();
      if (p.type == kFrame && p.payload.size() >= kFrameHeader) {
        uint64_t received;
        memcpy(&received, p.payload.data() + 1, 8);
        it->second.frames.push_back(
            {p.payload[0], std::string(p.payload.substr(kFrameHeader)), received});
      } else if (p.type == kOutcome) {
        it->second.meta["outcome"] = nlohmann::json::parse(p.payload, nullptr, false);
      } else if (p.type == kForget) {
        j->dead_ += j->live_[p.handle];
        j->live_.erase(p.handle);
        found.erase(it);
      }
      return;
    }
    j->dead_ += p.whole.size();  // a record of no live exec
  });
  rd.Reset();
  // Appending after a torn tail would bury every later record: rewrite what is whole.
  j->fd_ = UniqueFd(open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  if (j->fd_ && (good < data->size() || j->dead_ > 0)) {
    Status cst = j->CompactLocked();
    if (!cst.ok()) {
      spdlog::warn("exec journal: {}", cst.ToString());
      if (good < data->size() && ftruncate(j->fd_.get(), static_cast<off_t>(good)) != 0)
        j->fd_.Reset();
    }
  }
  for (auto& [h, l] : found) {
    l.spill.reset(new ExecSpill(j, h));
    execs->push_back(std::move(l));
  }
  return j;
}

}  // namespace warren::node
