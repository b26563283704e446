#include "agent/py_marshal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <limits>

#include "base/subprocess.h"

namespace warren::agent {
namespace {

using nlohmann::json;

// What the real python3 makes of `blob`: marshal.loads, then back to JSON (bytes as hex, so
// a reader can tell them from str).
json PythonLoads(const std::string& blob) {
  char path[] = "/tmp/warren-marshal-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, blob.data(), blob.size()), static_cast<ssize_t>(blob.size()));
  close(fd);
  auto r = RunProgram({"/usr/bin/python3", "-c",
                       "import json, marshal, sys\n"
                       "v = marshal.loads(open(sys.argv[1], 'rb').read())\n"
                       "def plain(x):\n"
                       "    if isinstance(x, bytes): return {'bytes': x.hex()}\n"
                       "    if isinstance(x, dict): return {k: plain(w) for k, w in x.items()}\n"
                       "    if isinstance(x, list): return [plain(w) for w in x]\n"
                       "    return x\n"
                       "print(json.dumps(plain(v)))",
                       path});
  unlink(path);
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return nullptr;
  EXPECT_EQ(r->exit_code, 0) << r->output;
  return json::parse(r->output, nullptr, false);
}

TEST(PyMarshal, PythonReadsEveryKindOfValueAsItWasSent) {
  json v = {
      {"small", 7},
      {"negative", -5},
      {"int32_edges", {INT32_MAX, INT32_MIN}},
      {"past_int32", {int64_t{1} << 31, -(int64_t{1} << 31) - 1, int64_t{1} << 40}},
      {"int64_edges", {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}},
      {"uint64_max", std::numeric_limits<uint64_t>::max()},
      {"zero", 0},
      {"float", 1.5},
      {"text", "caf\xc3\xa9 \xe2\x88\x91 \xf0\x9f\x98\x80"},
      {"empty", ""},
      {"flags", {true, false, nullptr}},
      {"nested", {{"list", json::array({1, "two", json::object()})}, {"none", json::array()}}}};
  std::string blob;
  PutMarshal(v, &blob);
  EXPECT_EQ(PythonLoads(blob), v);
}

TEST(PyMarshal, ADictCarriesBytesBesideItsMembers) {
  const std::string raw("\0\x01\xff\n", 4);
  std::string blob;
  PutMarshalDict({{"mode", "python"}, {"files", json::array()}}, "data", raw, &blob);
  EXPECT_EQ(
      PythonLoads(blob),
      json({{"mode", "python"}, {"files", json::array()}, {"data", {{"bytes", "0001ff0a"}}}}));
  blob.clear();
  PutMarshalDict({{"mode", "python"}}, "", "", &blob);
  EXPECT_EQ(PythonLoads(blob), json({{"mode", "python"}}));
}

}  // namespace
}  // namespace warren::agent
