// How much of an executable an exec reads: up to the end of the last part a program header
// names (its loaded segments, and what the kernel reads from the file itself: the
// interpreter's name, notes) and the program headers. What follows (section headers, symbols, debug
// information) is for tools; a copy that only runs (the node's agent, a microVM's /init) needs none
// of it.
#pragma once

#include <cstdint>
#include <string_view>

namespace warren::runtime {

// Of the executable open at `fd`, `size` bytes long.
uint64_t ExecutablePrefixBytes(int fd, uint64_t size);
// Of the executable whose bytes are `file`.
uint64_t ExecutablePrefixBytes(std::string_view file);

// Makes the ELF header at `header` (the first `len` bytes of such a copy) name no section
// headers, which the copy does not hold: e_shoff, e_shnum and e_shstrndx zeroed, so tools
// (readelf, gdb, perf) see a file without sections, not a table past its end. False if it is
// not a 64-bit ELF header.
bool DropSectionHeaders(char* header, size_t len);

}  // namespace warren::runtime
