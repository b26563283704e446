#include "agent/python_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "agent/py_marshal.h"
#include "runtime/fncall/zygote_request.h"

namespace warren::agent {
namespace {

using nlohmann::json;

// Reads the encoding back as the C zygote does (zygote_lib.c, worker_request).
struct Decoded {
  wz_request_head head{};
  std::string cwd;
  struct File {
    std::string name;
    uint32_t mode;
    std::string data;
  };
  std::vector<File> files;
  std::string dict;
};

Decoded Decode(const std::string& msg) {
  Decoded d;
  size_t pos = 0;
  auto u32 = [&] {
    uint32_t v;
    memcpy(&v, msg.data() + pos, 4);
    pos += 4;
    return v;
  };
  const uint32_t head_len = u32();
  const size_t head_start = pos;
  memcpy(&d.head, msg.data() + pos, sizeof d.head);
  pos += sizeof d.head;
  d.cwd = msg.substr(pos, d.head.cwd_len);
  pos += d.head.cwd_len;
  std::vector<uint64_t> lens;
  for (uint32_t i = 0; i < d.head.nfiles; ++i) {
    wz_request_file f;
    memcpy(&f, msg.data() + pos, sizeof f);
    pos += sizeof f;
    d.files.push_back({msg.substr(pos, f.name_len), f.mode, ""});
    lens.push_back(f.len);
    pos += f.name_len;
  }
  EXPECT_EQ(pos - head_start, head_len);
  for (size_t i = 0; i < lens.size(); ++i) {
    d.files[i].data = msg.substr(pos, lens[i]);
    pos += lens[i];
  }
  const uint32_t dict_len = u32();
  d.dict = msg.substr(pos, dict_len);
  EXPECT_EQ(pos + dict_len, msg.size());
  return d;
}

TEST(PythonRequest, FilesCwdAndLimitsGoFirstTheRestIsMarshal) {
  json req = {{"mode", "python"},
              {"code", "print(1)"},
              {"args", json::array({"a"})},
              {"filename", "main.py"},
              {"cwd", "/tmp/sub"},
              {"files", json::array({{{"name", "main.py"}, {"len", 8}, {"mode", 0644}},
                                     {{"name", "in.txt"}, {"len", 3}, {"mode", 0600}}})},
              {"limits",
               {{"wall_ms", 10000},
                {"cpu_s", 10},
                {"as_bytes", 256u << 20},
                {"stack_bytes", 8u << 20},
                {"fsize_bytes", 64u << 20},
                {"nproc", 64},
                {"nofile", 256},
                {"max_output", 1 << 20}}}};
  Decoded d = Decode(EncodePythonRequest(req, "print(1)abc"));
  EXPECT_EQ(d.head.version, WZ_REQUEST_VERSION);
  EXPECT_EQ(d.head.limits.cpu_s, 10u);
  EXPECT_EQ(d.head.limits.as_bytes, 256u << 20);
  EXPECT_EQ(d.head.limits.stack_bytes, 8u << 20);
  EXPECT_EQ(d.head.limits.fsize_bytes, 64u << 20);
  EXPECT_EQ(d.head.limits.nproc, 64u);
  EXPECT_EQ(d.head.limits.nofile, 256u);
  EXPECT_EQ(d.cwd, "/tmp/sub");
  ASSERT_EQ(d.files.size(), 2u);
  EXPECT_EQ(d.files[0].name, "main.py");
  EXPECT_EQ(d.files[0].mode, 0644u);
  EXPECT_EQ(d.files[0].data, "print(1)");
  EXPECT_EQ(d.files[1].name, "in.txt");
  EXPECT_EQ(d.files[1].mode, 0600u);
  EXPECT_EQ(d.files[1].data, "abc");
  // Only what Python needs is marshal'd: no files, limits or cwd.
  std::string want;
  PutMarshalDict({{"args", json::array({"a"})},
                  {"code", "print(1)"},
                  {"filename", "main.py"},
                  {"mode", "python"}},
                 "", "", &want);
  EXPECT_EQ(d.dict, want);
}

TEST(PythonRequest, NoLimitsNoCwdAndAFileLongerThanTheBytesIsCut) {
  json req = {{"mode", "python"},
              {"code", "pass"},
              {"env", {{"A", "1"}}},
              {"files", json::array({{{"name", "main.py"}, {"len", 100}}})}};
  Decoded d = Decode(EncodePythonRequest(req, "pass"));
  EXPECT_EQ(d.head.limits.cpu_s, 0u);
  EXPECT_EQ(d.head.limits.as_bytes, 0u);
  EXPECT_EQ(d.head.limits.nofile, 0u);
  EXPECT_EQ(d.cwd, "");
  ASSERT_EQ(d.files.size(), 1u);
  EXPECT_EQ(d.files[0].mode, 0644u);  // the default, as for any file written for a call
  EXPECT_EQ(d.files[0].data, "pass");
  std::string want;
  PutMarshalDict({{"code", "pass"}, {"env", {{"A", "1"}}}, {"mode", "python"}}, "", "", &want);
  EXPECT_EQ(d.dict, want);
}

}  // namespace
}  // namespace warren::agent
