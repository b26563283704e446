#define FUSE_USE_VERSION 312
#include "blobfs/fuse_server.h"

#include <fuse3/fuse_lowlevel.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "base/sha256.h"
#include "base/thread_annotations.h"
#include "blobfs/page_cache_filler.h"
#include "image/layer_store.h"
#include "sys/fuse_abort.h"

namespace warren::blobfs {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;  // 1
constexpr fuse_ino_t kStatsIno = 2;
constexpr fuse_ino_t kFirstLayerIno = 3;
constexpr const char* kStatsName = ".stats";
// Layers never change: the kernel may keep their names and attributes for an hour.
constexpr double kLayerTimeout = 3600;

class Server {
 public:
  Server(BlobLayers* layers, uint32_t readahead_bytes)
      : layers_(layers), readahead_bytes_(readahead_bytes) {}

  static Server* Of(fuse_req_t req) { return static_cast<Server*>(fuse_req_userdata(req)); }

  struct stat Attr(fuse_ino_t ino, uint64_t size) const {
    struct stat st {};
    st.st_ino = ino;
    st.st_nlink = 1;
    st.st_mode = ino == kRootIno ? (S_IFDIR | 0555) : (S_IFREG | 0444);
    st.st_size = static_cast<off_t>(size);
    return st;
  }

  // The layer of inode `ino`, or null.
  std::shared_ptr<BlobLayers::Layer> LayerOf(fuse_ino_t ino) {
    MutexLock lock(&mu_);
    if (ino < kFirstLayerIno || ino - kFirstLayerIno >= by_ino_.size()) return nullptr;
    return by_ino_[ino - kFirstLayerIno];
  }

  Result<fuse_ino_t> Lookup(const std::string& hex, std::shared_ptr<BlobLayers::Layer>* out) {
    auto layer = WARREN_TRY(layers_->Open(hex));
    MutexLock lock(&mu_);
    auto [it, added] = ino_of_.emplace(hex, kFirstLayerIno + by_ino_.size());
    if (added) by_ino_.push_back(layer);
    *out = layer;
    return it->second;
  }

  std::vector<std::pair<std::string, fuse_ino_t>> Entries() {
    MutexLock lock(&mu_);
    return {ino_of_.begin(), ino_of_.end()};
  }

  BlobLayers* layers() { return layers_; }
  PageCacheFiller* filler() { return filler_; }
  uint32_t readahead_bytes() const { return readahead_bytes_; }
  void set_filler(PageCacheFiller* filler) { filler_ = filler; }  // before serving

 private:
  BlobLayers* const layers_;
  const uint32_t readahead_bytes_;
  PageCacheFiller* filler_ = nullptr;
  Mutex mu_;
  std::map<std::string, fuse_ino_t> ino_of_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<BlobLayers::Layer>> by_ino_ GUARDED_BY(mu_);
};

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Server* s = Server::Of(req);
  fuse_entry_param e{};
  if (parent != kRootIno) return void(fuse_reply_err(req, ENOENT));
  if (strcmp(name, kStatsName) == 0) {
    e.ino = kStatsIno;
    e.attr = s->Attr(kStatsIno, 0);
    return void(fuse_reply_entry(req, &e));
  }
  if (!IsSha256Hex(name)) return void(fuse_reply_err(req, ENOENT));
  std::shared_ptr<BlobLayers::Layer> layer;
  auto ino = s->Lookup(name, &layer);
  if (!ino.ok()) {
    if (ino.status().code() != Code::kNotFound)
      spdlog::warn("blobfsd: open layer sha256:{}: {}", name, ino.status().ToString());
    return void(fuse_reply_err(req, ENOENT));
  }
  e.ino = *ino;
  e.attr = s->Attr(*ino, s->layers()->Size(*layer));
  e.attr_timeout = e.entry_timeout = kLayerTimeout;
  fuse_reply_entry(req, &e);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Server* s = Server::Of(req);
  if (ino == kRootIno || ino == kStatsIno) {
    struct stat st = s->Attr(ino, 0);
    return void(fuse_reply_attr(req, &st, 0));
  }
  auto layer = s->LayerOf(ino);
  if (!layer) return void(fuse_reply_err(req, ENOENT));
  struct stat st = s->Attr(ino, s->layers()->Size(*layer));
  fuse_reply_attr(req, &st, kLayerTimeout);
}

void OnOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Server* s = Server::Of(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return void(fuse_reply_err(req, EROFS));
  if (ino == kStatsIno) {
    // A snapshot per open, read with direct I/O (no stale page cache, no size needed).
    fi->fh = reinterpret_cast<uint64_t>(new std::string(EncodeStats(s->layers()->Stats())));
    fi->direct_io = 1;
    return void(fuse_reply_open(req, fi));
  }
  auto layer = s->LayerOf(ino);
  if (!layer) return void(fuse_reply_err(req, ENOENT));
  fi->keep_cache = 1;  // immutable content; and an open must not drop what the filler stored
  fuse_reply_open(req, fi);
  // The inode is the kernel's by now (an open names it): its page cache can be filled.
  if (s->filler()) s->filler()->Start(ino, std::move(layer));
}

void OnRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  Server* s = Server::Of(req);
  if (ino == kStatsIno) {
    const auto* text = reinterpret_cast<const std::string*>(fi->fh);
    const size_t from = std::min(text->size(), static_cast<size_t>(off));
    return void(fuse_reply_buf(req, text->data() + from, std::min(size, text->size() - from)));
  }
  auto layer = s->LayerOf(ino);
  if (!layer) return void(fuse_reply_err(req, ENOENT));
  std::string out;
  Status st = s->layers()->Read(layer, static_cast<uint64_t>(off), size, &out);
  // Fail loud: the reader sees EIO, never zeros in place of data it could not get.
  if (!st.ok()) return void(fuse_reply_err(req, EIO));
  fuse_reply_buf(req, out.data(), out.size());
}

void OnRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino == kStatsIno) delete reinterpret_cast<std::string*>(fi->fh);
  fuse_reply_err(req, 0);
}

void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kRootIno) return void(fuse_reply_err(req, ENOTDIR));
  fuse_reply_open(req, fi);
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Server* s = Server::Of(req);
  if (ino != kRootIno) return void(fuse_reply_err(req, ENOTDIR));
  std::vector<std::pair<std::string, fuse_ino_t>> all = {
      {".", kRootIno}, {"..", kRootIno}, {kStatsName, kStatsIno}};
  for (auto& e : s->Entries()) all.push_back(e);
  std::string buf;
  for (size_t i = static_cast<size_t>(off); i < all.size(); ++i) {
    struct stat st = s->Attr(all[i].second, 0);
    const size_t need = fuse_add_direntry(req, nullptr, 0, all[i].first.c_str(), nullptr, 0);
    if (buf.size() + need > size) break;
    const size_t at = buf.size();
    buf.resize(at + need);
    fuse_add_direntry(req, buf.data() + at, need, all[i].first.c_str(), &st,
                      static_cast<off_t>(i + 1));
  }
  fuse_reply_buf(req, buf.data(), buf.size());
}

void OnInit(void* userdata, fuse_conn_info* conn) {
  // Up to a chunk per read request where the kernel allows (it caps at its max_pages).
  conn->max_read = 1 << 20;
  // EROFS reads a layer's blob file buffered (so it can hit what the filler stored), and the
  // kernel reads ahead of that too: no further than the mount over it does.
  conn->max_readahead = static_cast<Server*>(userdata)->readahead_bytes();
}

// Stops the page cache fills once the loop has ended. A fill's store waits on any page an
// unanswered read holds locked: those reads are answered here while the fills end. A read that
// no one will answer (the loop's threads can drop one as they stop; a fetch can hang) would
// hold a store forever (sys/fuse_abort.h), so after kFillStopWait the connection is aborted:
// every pending read fails, and the stores return.
constexpr auto kFillStopWait = std::chrono::seconds(2);

void StopFills(fuse_session* se, PageCacheFiller* filler, const std::string& mountpoint) {
  fuse_session_reset(se);  // the loop marked it exited; requests are still served below
  const auto deadline = std::chrono::steady_clock::now() + kFillStopWait;
  bool aborted = false;
  while (!filler->Stop(std::chrono::milliseconds(0))) {
    if (!aborted && std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("blobfsd: page cache fills still running at exit: aborting the connection");
      if (Status st = sys::AbortFuseConnection(mountpoint); !st.ok())
        spdlog::warn("blobfsd: {}", st.ToString());
      aborted = true;
    }
    if (aborted) {  // nothing to serve any more: wait for the stores to return
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    pollfd p{fuse_session_fd(se), POLLIN, 0};
    if (poll(&p, 1, 10) != 1 || !(p.revents & POLLIN)) continue;
    fuse_buf buf{};
    if (fuse_session_receive_buf(se, &buf) > 0) fuse_session_process_buf(se, &buf);
    free(buf.mem);
  }
}

}  // namespace

int RunBlobfsd(const BlobfsdOptions& opts) {
  image::LayerStore store(opts.store_root);
  if (Status st = store.Init(); !st.ok()) {
    spdlog::error("blobfsd: {}", st.ToString());
    return 1;
  }
  auto source = image::OpenBlobSource(opts.source);
  if (!source.ok()) {
    spdlog::error("blobfsd: {}", source.status().ToString());
    return 1;
  }
  ChunkCache cache(opts.store_root, opts.cache_high, opts.cache_low);
  if (Status st = cache.Load(); !st.ok()) {
    spdlog::error("blobfsd: {}", st.ToString());
    return 1;
  }
  std::unique_ptr<image::BlobSource> publish;
  if (!opts.publish.empty()) {
    auto dir = image::OpenBlobSource(opts.publish);
    if (!dir.ok() || opts.publish[0] != '/') {
      spdlog::error("blobfsd: --publish wants the store's directory: {}",
                    dir.ok() ? opts.publish : dir.status().ToString());
      return 1;
    }
    publish = std::move(*dir);
  }
  BlobLayers layers(&store, source->get(), &cache, opts.layers, publish.get());
  Server server(&layers, opts.readahead_kb << 10);

  fuse_lowlevel_ops ops{};
  ops.init = OnInit;
  ops.lookup = OnLookup;
  ops.getattr = OnGetattr;
  ops.open = OnOpen;
  ops.read = OnRead;
  ops.release = OnRelease;
  ops.opendir = OnOpendir;
  ops.readdir = OnReaddir;
  // Reads of up to 1 MiB per request (a chunk), where the kernel allows it.
  std::vector<std::string> argv_s = {
      "blobfsd", "-o", "ro,allow_other,fsname=warren-blobfs,subtype=warren,max_read=1048576"};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, &server);
  if (!se) {
    spdlog::error("blobfsd: fuse_session_new failed");
    return 1;
  }
  PageCacheFiller filler(&layers, [se](uint64_t ino, uint64_t offset, std::string_view bytes) {
    fuse_bufvec bv = FUSE_BUFVEC_INIT(bytes.size());
    bv.buf[0].mem = const_cast<char*>(bytes.data());
    return fuse_lowlevel_notify_store(se, ino, static_cast<off_t>(offset), &bv,
                                      static_cast<fuse_buf_copy_flags>(0));
  });
  if (opts.fill_page_cache) server.set_filler(&filler);
  // Whatever mask the starter left, the signals that stop the daemon must reach it.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, s);
  pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  int rc = 1;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, opts.mountpoint.c_str()) == 0) {
      spdlog::info("blobfsd: serving {} (store {}, cache up to {} MB)", opts.mountpoint,
                   opts.source, opts.cache_high >> 20);
      fuse_loop_config* cfg = fuse_loop_cfg_create();
      fuse_loop_cfg_set_max_threads(cfg, 64);
      fuse_loop_cfg_set_idle_threads(cfg, 8);
      rc = fuse_session_loop_mt(se, cfg) == 0 ? 0 : 1;
      fuse_loop_cfg_destroy(cfg);
      StopFills(se, &filler, opts.mountpoint);
      fuse_session_unmount(se);
    } else {
      spdlog::error("blobfsd: cannot mount {}", opts.mountpoint);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  layers.FlushTraces();
  return rc;
}

}  // namespace warren::blobfs
