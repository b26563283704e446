#include "image/tar_create.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>

namespace warren::image {
namespace {

struct SinkCtx {
  const std::function<Status(const void*, size_t)>* sink;
  Status status;
};

la_ssize_t WriteCb(archive*, void* ctx, const void* buf, size_t n) {
  auto* c = static_cast<SinkCtx*>(ctx);
  c->status = (*c->sink)(buf, n);
  return c->status.ok() ? static_cast<la_ssize_t>(n) : -1;
}

}  // namespace

Status WriteTarOfDir(const std::string& dir,
                     const std::function<Status(const void*, size_t)>& sink) {
  std::unique_ptr<archive, decltype(&archive_read_free)> disk(archive_read_disk_new(),
                                                              archive_read_free);
  archive_read_disk_set_symlink_physical(disk.get());
  archive_read_disk_set_standard_lookup(disk.get());
  archive_read_disk_set_behavior(disk.get(), ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
  if (archive_read_disk_open(disk.get(), dir.c_str()) != ARCHIVE_OK)
    return Invalid(std::string("cannot read directory: ") + archive_error_string(disk.get()), dir);

  std::unique_ptr<archive, decltype(&archive_write_free)> out(archive_write_new(),
                                                              archive_write_free);
  archive_write_set_format_pax_restricted(out.get());
  archive_write_set_bytes_per_block(out.get(), 64 * 1024);
  SinkCtx ctx{&sink, Status::Ok()};
  if (archive_write_open(out.get(), &ctx, nullptr, WriteCb, nullptr) != ARCHIVE_OK)
    return Internal("open tar writer", dir, archive_error_string(out.get()));

  std::string prefix = dir;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  for (;;) {
    archive_entry* e = archive_entry_new();
    int r = archive_read_next_header2(disk.get(), e);
    if (r == ARCHIVE_EOF) {
      archive_entry_free(e);
      break;
    }
    if (r < ARCHIVE_WARN) {
      Status st = Internal("read directory", dir, archive_error_string(disk.get()));
      archive_entry_free(e);
      return st;
    }
    archive_read_disk_descend(disk.get());
    std::string path = archive_entry_pathname(e);
    std::string rel = path.size() > prefix.size() ? path.substr(prefix.size() + 1) : ".";
    archive_entry_set_pathname(e, rel.c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string h = hl;
      if (h.rfind(prefix + "/", 0) == 0)
        archive_entry_set_hardlink(e, h.substr(prefix.size() + 1).c_str());
    }
    r = archive_write_header(out.get(), e);
    if (r < ARCHIVE_WARN) {
      Status st = ctx.status.ok()
                      ? Internal("write tar header", rel, archive_error_string(out.get()))
                      : ctx.status;
      archive_entry_free(e);
      return st;
    }
    if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
      const void* buf;
      size_t size;
      la_int64_t offset;
      while ((r = archive_read_data_block(disk.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
        if (archive_write_data(out.get(), buf, size) < 0) {
          archive_entry_free(e);
          return ctx.status.ok() ? Internal("write tar data", rel, archive_error_string(out.get()))
                                 : ctx.status;
        }
      }
    }
    archive_entry_free(e);
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return ctx.status.ok() ? Internal("close tar", dir, archive_error_string(out.get()))
                           : ctx.status;
  return Status::Ok();
}

}  // namespace warren::image
