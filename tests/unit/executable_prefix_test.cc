// ExecutablePrefixBytes: the part of an executable an exec reads, and the whole of anything else.
#include "runtime/executable_prefix.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace warren::runtime {
namespace {

// An ELF file of `size` bytes whose program headers are `ph`.
std::string Elf(std::initializer_list<Elf64_Phdr> ph, size_t size) {
  std::string f(size, '\0');
  Elf64_Ehdr eh{};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_phoff = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = static_cast<Elf64_Half>(ph.size());
  memcpy(f.data(), &eh, sizeof eh);
  size_t off = sizeof eh;
  for (const Elf64_Phdr& p : ph) {
    memcpy(f.data() + off, &p, sizeof p);
    off += sizeof p;
  }
  return f;
}

Elf64_Phdr Segment(uint32_t type, uint64_t offset, uint64_t filesz) {
  Elf64_Phdr p{};
  p.p_type = type;
  p.p_offset = offset;
  p.p_filesz = filesz;
  p.p_memsz = filesz + 4096;  // bss is not in the file
  return p;
}

TEST(ExecutablePrefixTest, EndsWithTheLastPartAProgramHeaderNames) {
  // Two loaded segments and 1 MiB of "debug info" after them.
  std::string f = Elf({Segment(PT_LOAD, 0, 0x1000), Segment(PT_LOAD, 0x3000, 0x2345)}, 1 << 20);
  EXPECT_EQ(ExecutablePrefixBytes(f), 0x5345u);
  // The kernel reads some parts from the file itself (the interpreter's name, notes), wherever
  // they are: those are kept too. An empty one (GNU_STACK) names nothing.
  f = Elf({Segment(PT_LOAD, 0, 0x1000), Segment(PT_NOTE, 0x8000, 0x100),
           Segment(PT_GNU_STACK, 0x20000, 0)},
          1 << 20);
  EXPECT_EQ(ExecutablePrefixBytes(f), 0x8100u);
}

TEST(ExecutablePrefixTest, ACopyNamesNoSectionHeaders) {
  std::string f = Elf({Segment(PT_LOAD, 0, 0x10)}, 4096);
  auto* eh = reinterpret_cast<Elf64_Ehdr*>(f.data());
  eh->e_shoff = 1 << 20, eh->e_shnum = 40, eh->e_shstrndx = 39;
  ASSERT_TRUE(DropSectionHeaders(f.data(), f.size()));
  eh = reinterpret_cast<Elf64_Ehdr*>(f.data());
  EXPECT_EQ(eh->e_shoff, 0u);
  EXPECT_EQ(eh->e_shnum, 0u);
  EXPECT_EQ(eh->e_shstrndx, SHN_UNDEF);
  EXPECT_EQ(eh->e_phnum, 1u);  // the rest as it was
  std::string junk(100, 'x');
  EXPECT_FALSE(DropSectionHeaders(junk.data(), junk.size()));
  EXPECT_EQ(junk, std::string(100, 'x'));
}

TEST(ExecutablePrefixTest, KeepsTheProgramHeadersEvenPastTheSegments) {
  std::string f = Elf({Segment(PT_LOAD, 0, 0x10)}, 4096);
  EXPECT_EQ(ExecutablePrefixBytes(f), sizeof(Elf64_Ehdr) + sizeof(Elf64_Phdr));
}

TEST(ExecutablePrefixTest, AnythingItCannotReadIsKeptWhole) {
  EXPECT_EQ(ExecutablePrefixBytes(std::string(100, 'x')), 100u);  // no ELF magic
  EXPECT_EQ(ExecutablePrefixBytes(std::string("\x7f"
                                              "ELF",
                                              4)),
            4u);  // cut short
  std::string f = Elf({Segment(PT_LOAD, 0, 0x10)}, 4096);
  f[EI_CLASS] = ELFCLASS32;
  EXPECT_EQ(ExecutablePrefixBytes(f), 4096u);
  // Program headers said to lie past the end of the file.
  f = Elf({Segment(PT_LOAD, 0, 0x10)}, 4096);
  reinterpret_cast<Elf64_Ehdr*>(f.data())->e_phoff = 1 << 20;
  EXPECT_EQ(ExecutablePrefixBytes(f), 4096u);
  // A segment said to end past the file: never more than the file.
  f = Elf({Segment(PT_LOAD, 0, 1 << 30)}, 4096);
  EXPECT_EQ(ExecutablePrefixBytes(f), 4096u);
}

}  // namespace
}  // namespace warren::runtime
