#include "base/ids.h"

#include <sys/random.h>
#include <time.h>

#include <cstdio>
#include <vector>

namespace warren {

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : buf) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string NewSandboxId() { return "sb-" + RandomHex(8); }
std::string NewExecId() { return "ex-" + RandomHex(6); }

std::string Rfc3339(double unix_seconds) {
  time_t secs = static_cast<time_t>(unix_seconds);
  long ms = static_cast<long>((unix_seconds - static_cast<double>(secs)) * 1000);
  tm t;
  gmtime_r(&secs, &t);
  char buf[64];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", t.tm_year + 1900, t.tm_mon + 1,
           t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms);
  return buf;
}

double UnixNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

std::string NowRfc3339() { return Rfc3339(UnixNow()); }

double ParseRfc3339(const std::string& s) {
  tm t{};
  int ms = 0;
  if (sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour,
             &t.tm_min, &t.tm_sec, &ms) < 6)
    return 0;
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  return static_cast<double>(timegm(&t)) + ms / 1000.0;
}

double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace warren
