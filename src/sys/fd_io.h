// Whole reads and writes on a file descriptor, through EINTR and short counts.
#pragma once

#include <string>
#include <string_view>

namespace warren::sys {

// Writes all of `data`; on a non-blocking fd, waits for room. False on an error (EPIPE...).
bool WriteFull(int fd, std::string_view data);
// Reads exactly `n` bytes into `out`. False on an error or an end before `n` bytes.
bool ReadFull(int fd, size_t n, std::string* out);
// Reads exactly `n` bytes into `buf`, allocating nothing. False on an error or an early end.
bool ReadExact(int fd, void* buf, size_t n);

}  // namespace warren::sys
