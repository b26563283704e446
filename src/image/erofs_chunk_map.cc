#include "image/erofs_chunk_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "base/unique_fd.h"

namespace warren::image {
namespace {

// The on-disk format, from the kernel's fs/erofs/erofs_fs.h (little-endian throughout).
constexpr uint64_t kSuperOffset = 1024;
constexpr uint32_t kMagic = 0xE0F5E1E2;
constexpr unsigned kInodeSlotBits = 5;  // a nid counts 32-byte slots from meta_blkaddr
constexpr unsigned kLayoutFlatPlain = 0;
constexpr unsigned kLayoutFlatInline = 2;
constexpr unsigned kLayoutChunkBased = 4;
constexpr uint16_t kChunkFormatBlkBitsMask = 0x1f;
constexpr uint16_t kChunkFormatIndexes = 0x20;
constexpr uint32_t kNullAddr = 0xffffffff;
constexpr size_t kDirentSize = 12;
constexpr uint64_t kMaxMetaBytes = 1ull << 30;
// Deeper than any path the kernel can open (PATH_MAX 4096 allows 2048 levels of "a/"); it
// bounds the walk's recursion on a hostile image.
constexpr size_t kMaxDepth = 2048;

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : b_(bytes), path_(path) {}

  bool Has(uint64_t off, uint64_t n) const { return off <= b_.size() && n <= b_.size() - off; }
  uint16_t U16(uint64_t off) const { return Le(off, 2); }
  uint32_t U32(uint64_t off) const { return static_cast<uint32_t>(Le(off, 4)); }
  uint64_t U64(uint64_t off) const { return Le(off, 8); }
  const char* At(uint64_t off) const { return b_.data() + off; }
  size_t size() const { return b_.size(); }
  Status Bad(const std::string& why) const { return Invalid("read EROFS image: " + why, path_); }

 private:
  // Callers check Has() first; out of range reads as 0 rather than touching other memory.
  uint64_t Le(uint64_t off, int n) const {
    if (!Has(off, static_cast<uint64_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b_[off + i]);
    return v;
  }
  const std::string& b_;
  const std::string& path_;
};

struct Inode {
  uint64_t pos = 0;    // where the on-disk inode starts
  uint64_t isize = 0;  // 32 (compact) or 64 (extended)
  uint64_t xattr_isize = 0;
  unsigned layout = 0;
  uint16_t mode = 0;
  uint64_t size = 0;
  uint32_t u = 0;  // raw_blkaddr, or the chunk format in its low 16 bits
  uint64_t tail() const { return pos + isize + xattr_isize; }
};

class Walker {
 public:
  Walker(const Reader& r, ErofsChunkMap* out) : r_(r), out_(out) {}

  Status Run() {
    if (!r_.Has(kSuperOffset, 128)) return r_.Bad("too short for a superblock");
    if (r_.U32(kSuperOffset) != kMagic) return r_.Bad("bad superblock magic");
    blkbits_ = static_cast<uint8_t>(*r_.At(kSuperOffset + 12));
    if (blkbits_ < 9 || blkbits_ > 16) return r_.Bad("unsupported block size");
    out_->block_size = 1u << blkbits_;
    const uint16_t root = r_.U16(kSuperOffset + 14);
    meta_base_ = static_cast<uint64_t>(r_.U32(kSuperOffset + 40)) << blkbits_;
    const uint16_t extra_devices = r_.U16(kSuperOffset + 86);
    uint32_t slots = 1;
    while (slots < static_cast<uint32_t>(extra_devices) + 1) slots <<= 1;
    device_mask_ = static_cast<uint16_t>(slots - 1);
    WARREN_RETURN_IF_ERROR(WalkDir(root));
    auto& ex = out_->extents;
    std::sort(ex.begin(), ex.end(),
              [](const BlobExtent& a, const BlobExtent& b) { return a.offset < b.offset; });
    ex.erase(std::unique(ex.begin(), ex.end()), ex.end());
    for (size_t i = 1; i < ex.size(); ++i)
      if (ex[i].offset < ex[i - 1].offset + ex[i - 1].length)
        return r_.Bad("chunks overlap in the blob");
    return Status::Ok();
  }

 private:
  Result<Inode> ReadInode(uint64_t nid) {
    // Every inode read counts against a budget no honest image exceeds (one per slot).
    if (++inodes_read_ > r_.size() / 32 + 1) return r_.Bad("more inodes than the image holds");
    Inode in;
    if (nid > (r_.size() >> kInodeSlotBits)) return r_.Bad("inode number out of range");
    in.pos = meta_base_ + (nid << kInodeSlotBits);
    if (!r_.Has(in.pos, 32)) return r_.Bad("inode out of range");
    const uint16_t format = r_.U16(in.pos);
    const bool extended = format & 1;
    in.isize = extended ? 64 : 32;
    if (!r_.Has(in.pos, in.isize)) return r_.Bad("inode out of range");
    in.layout = (format >> 1) & 7;
    const uint16_t icount = r_.U16(in.pos + 2);
    in.xattr_isize = icount == 0 ? 0 : 12 + 4 * (static_cast<uint64_t>(icount) - 1);
    in.mode = r_.U16(in.pos + 4);
    in.size = extended ? r_.U64(in.pos + 8) : r_.U32(in.pos + 8);
    in.u = r_.U32(in.pos + 16);
    return in;
  }

  // The bytes of a flat (plain or inline) inode's block `i`.
  Result<std::pair<uint64_t, uint64_t>> FlatBlock(const Inode& in, uint64_t i) {
    const uint64_t bs = out_->block_size;
    const uint64_t nblocks = (in.size + bs - 1) / bs;
    const uint64_t len = std::min(bs, in.size - i * bs);
    uint64_t off;
    if (in.layout == kLayoutFlatInline && i == nblocks - 1)
      off = in.tail();
    else
      off = (static_cast<uint64_t>(in.u) << blkbits_) + i * bs;
    if (!r_.Has(off, len)) return r_.Bad("directory data out of range");
    return std::make_pair(off, len);
  }

  Status WalkDir(uint64_t nid) {
    if (dirs_.size() >= kMaxDepth) return r_.Bad("directories nest too deep");
    if (!dirs_.insert(nid).second) return r_.Bad("a directory is its own ancestor");
    Inode dir = WARREN_TRY(ReadInode(nid));
    if (!S_ISDIR(dir.mode)) return r_.Bad("the root or a directory entry is not a directory");
    if (dir.layout != kLayoutFlatPlain && dir.layout != kLayoutFlatInline)
      return r_.Bad("a directory's data is neither plain nor inline");
    if (dir.size > r_.size()) return r_.Bad("a directory is larger than the image");
    const uint64_t bs = out_->block_size;
    for (uint64_t b = 0; b * bs < dir.size; ++b) {
      auto [off, len] = WARREN_TRY(FlatBlock(dir, b));
      const uint16_t first = r_.U16(off + 8);
      if (first < kDirentSize || first % kDirentSize != 0 || first > len)
        return r_.Bad("a directory block's entries are malformed");
      const size_t n = first / kDirentSize;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t d = off + i * kDirentSize;
        const uint64_t child = r_.U64(d);
        const uint16_t name_off = r_.U16(d + 8);
        const uint64_t name_end = i + 1 < n ? r_.U16(d + kDirentSize + 8) : len;
        if (name_off < first || name_end > len || name_end < name_off)
          return r_.Bad("a directory entry's name is out of its block");
        const char* name = r_.At(off + name_off);
        const size_t name_len = strnlen(name, name_end - name_off);
        const std::string_view nm(name, name_len);
        if (nm == "." || nm == "..") continue;
        WARREN_RETURN_IF_ERROR(Visit(child));
      }
    }
    dirs_.erase(nid);
    return Status::Ok();
  }

  Status Visit(uint64_t nid) {
    Inode in = WARREN_TRY(ReadInode(nid));
    if (S_ISDIR(in.mode)) return WalkDir(nid);
    if (!S_ISREG(in.mode)) return Status::Ok();
    if (!files_.insert(nid).second) return Status::Ok();  // a hard link seen already
    if (in.layout != kLayoutChunkBased) {
      ++out_->files_in_meta;
      return Status::Ok();
    }
    return MapChunks(in);
  }

  Status MapChunks(const Inode& in) {
    const uint16_t format = static_cast<uint16_t>(in.u & 0xffff);
    const unsigned chunkbits = blkbits_ + (format & kChunkFormatBlkBitsMask);
    if (chunkbits > 40) return r_.Bad("chunk size out of range");
    const uint64_t chunk = 1ull << chunkbits;
    if (out_->chunk_size != 0 && out_->chunk_size != chunk)
      return r_.Bad("files use different chunk sizes");
    out_->chunk_size = chunk;
    const uint64_t nchunks = (in.size + chunk - 1) / chunk;
    const bool indexes = format & kChunkFormatIndexes;
    const uint64_t unit = indexes ? 8 : 4;
    const uint64_t base = (in.tail() + unit - 1) / unit * unit;
    if (nchunks > r_.size() / unit || !r_.Has(base, nchunks * unit))
      return r_.Bad("a file's chunk index is out of range");
    const uint64_t bs = out_->block_size;
    bool in_meta = false;
    for (uint64_t i = 0; i < nchunks; ++i) {
      const uint64_t e = base + i * unit;
      const uint16_t device = indexes ? (r_.U16(e + 2) & device_mask_) : 0;
      const uint32_t blk = indexes ? r_.U32(e + 4) : r_.U32(e);
      if (blk == kNullAddr) continue;  // a hole reads as zeros
      if (device == 0) {
        in_meta = true;
        continue;
      }
      if (device != 1) return r_.Bad("a chunk is on a device other than the blob");
      const uint64_t len = std::min(chunk, in.size - i * chunk);
      out_->extents.push_back({static_cast<uint64_t>(blk) << blkbits_, (len + bs - 1) / bs * bs});
    }
    out_->files_in_meta += in_meta;
    return Status::Ok();
  }

  const Reader& r_;
  ErofsChunkMap* out_;
  uint8_t blkbits_ = 12;
  uint64_t meta_base_ = 0;
  uint16_t device_mask_ = 0;
  uint64_t inodes_read_ = 0;
  std::set<uint64_t> dirs_;   // the directories on the current path (cycle check)
  std::set<uint64_t> files_;  // regular files mapped (hard links once)
};

}  // namespace

Result<ErofsChunkMap> MapErofsChunks(const std::string& meta_path) {
  UniqueFd fd(open(meta_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open EROFS image", meta_path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat EROFS image", meta_path);
  if (static_cast<uint64_t>(st.st_size) > kMaxMetaBytes)
    return Invalid("read EROFS image: metadata over 1 GiB", meta_path);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = pread(fd.get(), bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read EROFS image", meta_path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  ErofsChunkMap map;
  Reader r(bytes, meta_path);
  WARREN_RETURN_IF_ERROR(Walker(r, &map).Run());
  return map;
}

}  // namespace warren::image
