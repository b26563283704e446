// How much of an executable an exec reads: up to the end of its last loaded segment and its
// program headers. What follows (section headers, symbols, debug information) is for tools;
// a copy that only runs (the node's agent, a microVM's /init) needs none of it.
#pragma once

#include <cstdint>
#include <string_view>

namespace warren::runtime {

// Of the executable open at `fd`, `size` bytes long.
uint64_t ExecutablePrefixBytes(int fd, uint64_t size);
// Of the executable whose bytes are `file`.
uint64_t ExecutablePrefixBytes(std::string_view file);

}  // namespace warren::runtime
