#include "runtime/executable_prefix.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

namespace warren::runtime {
namespace {

constexpr int kMaxHeaders = 64;

// `read(buf, len, offset)` reads exactly len bytes or fails. The whole `size` where the file
// is not a 64-bit ELF file this can read.
uint64_t PrefixOf(uint64_t size, const std::function<bool(void*, size_t, uint64_t)>& read) {
  Elf64_Ehdr eh;
  if (!read(&eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > kMaxHeaders)
    return size;
  Elf64_Phdr ph[kMaxHeaders];
  const size_t bytes = eh.e_phnum * sizeof(Elf64_Phdr);
  if (!read(ph, bytes, eh.e_phoff)) return size;
  uint64_t end = eh.e_phoff + bytes;
  for (int i = 0; i < eh.e_phnum; ++i)
    if (ph[i].p_filesz > 0) end = std::max<uint64_t>(end, ph[i].p_offset + ph[i].p_filesz);
  return std::min(end, size);
}

}  // namespace

uint64_t ExecutablePrefixBytes(int fd, uint64_t size) {
  return PrefixOf(size, [fd](void* buf, size_t len, uint64_t off) {
    return pread(fd, buf, len, static_cast<off_t>(off)) == static_cast<ssize_t>(len);
  });
}

uint64_t ExecutablePrefixBytes(std::string_view file) {
  return PrefixOf(file.size(), [file](void* buf, size_t len, uint64_t off) {
    if (off > file.size() || len > file.size() - off) return false;
    memcpy(buf, file.data() + off, len);
    return true;
  });
}

bool DropSectionHeaders(char* header, size_t len) {
  Elf64_Ehdr eh;
  if (len < sizeof eh) return false;
  memcpy(&eh, header, sizeof eh);
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64) return false;
  eh.e_shoff = 0;
  eh.e_shnum = 0;
  eh.e_shstrndx = SHN_UNDEF;
  memcpy(header, &eh, sizeof eh);
  return true;
}

}  // namespace warren::runtime
