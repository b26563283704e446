#include "agent/native_request.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace warren::agent {
namespace {

using nlohmann::json;

// Takes a request apart as pid 1 does (call_worker.cc): the head, the strings split in place,
// the files' table, the files' bytes.
struct Decoded {
  NativeRequestHead head{};
  std::string strings;
  std::vector<char*> ptrs;
  NativeRequestView view;
  const char* error = nullptr;
  std::vector<NativeRequestFile> table;
  std::string bytes;
};

void Decode(const std::string& msg, Decoded* d) {
  ASSERT_GE(msg.size(), sizeof d->head);
  memcpy(&d->head, msg.data(), sizeof d->head);
  size_t at = sizeof d->head;
  d->strings = msg.substr(at, d->head.strings_len);
  at += d->head.strings_len;
  d->ptrs.resize(NativeRequestPointers(d->head));
  d->error =
      SplitNativeRequest(d->head, d->strings.data(), d->ptrs.data(), d->ptrs.size(), &d->view);
  d->table.resize(d->head.nfiles);
  memcpy(d->table.data(), msg.data() + at, d->head.nfiles * sizeof(NativeRequestFile));
  at += d->head.nfiles * sizeof(NativeRequestFile);
  d->bytes = msg.substr(at);
}

TEST(NativeRequest, CarriesArgvEnvFilesLimitsAndWhatToBringBack) {
  const json req = {
      {"argv", {"./main", "a b", ""}},
      {"env", {{"PATH", "/usr/bin"}, {"LANG", "C.UTF-8"}}},
      {"cwd", "/tmp/work"},
      {"files", {{{"name", "main"}, {"len", 3}, {"mode", 0755}}, {{"name", "in.txt"}, {"len", 2}}}},
      {"limits", {{"cpu_s", 2}, {"as_bytes", 268435456}, {"nproc", 64}}},
      {"collect", {"main", "*.class"}}};
  Decoded d;
  Decode(EncodeNativeRequest(req, "ELFhi"), &d);
  ASSERT_EQ(d.error, nullptr);
  EXPECT_STREQ(d.view.cwd, "/tmp/work");
  ASSERT_EQ(d.head.argc, 3u);
  EXPECT_STREQ(d.view.argv[0], "./main");
  EXPECT_STREQ(d.view.argv[1], "a b");
  EXPECT_STREQ(d.view.argv[2], "");
  EXPECT_EQ(d.view.argv[3], nullptr);
  EXPECT_EQ(d.view.argv[-1], nullptr);  // the free slot, for /bin/sh
  ASSERT_EQ(d.head.envc, 2u);
  EXPECT_STREQ(d.view.envp[0], "LANG=C.UTF-8");  // nlohmann keeps keys in order
  EXPECT_STREQ(d.view.envp[1], "PATH=/usr/bin");
  EXPECT_EQ(d.view.envp[2], nullptr);
  ASSERT_EQ(d.head.nfiles, 2u);
  EXPECT_STREQ(d.view.file_names[0], "main");
  EXPECT_STREQ(d.view.file_names[1], "in.txt");
  EXPECT_EQ(d.table[0].len, 3u);
  EXPECT_EQ(d.table[0].mode, 0755u);
  EXPECT_EQ(d.table[1].len, 2u);
  EXPECT_EQ(d.table[1].mode, 0644u);
  EXPECT_EQ(d.bytes, "ELFhi");
  ASSERT_EQ(d.head.ncollect, 2u);
  EXPECT_STREQ(d.view.collect[0], "main");
  EXPECT_STREQ(d.view.collect[1], "*.class");
  EXPECT_EQ(d.head.limits.cpu_s, 2u);
  EXPECT_EQ(d.head.limits.as_bytes, 268435456u);
  EXPECT_EQ(d.head.limits.nproc, 64u);
  EXPECT_EQ(d.head.limits.stack_bytes, 0u);
}

TEST(NativeRequest, FieldsOfAnotherTypeCountAsAbsentAndFilesAreCutToTheBytesThereAre) {
  const json req = {{"argv", {"true", 7, nullptr}},
                    {"env", {{"A", 1}, {"B", "x"}}},
                    {"cwd", 5},
                    {"files", {{{"name", "big"}, {"len", 1000}}, {{"len", 1}}, "junk"}},
                    {"limits", {{"cpu_s", "ten"}, {"nofile", -3}}},
                    {"collect", "main"}};
  Decoded d;
  Decode(EncodeNativeRequest(req, "abc"), &d);
  ASSERT_EQ(d.error, nullptr);
  EXPECT_STREQ(d.view.cwd, "/tmp");
  ASSERT_EQ(d.head.argc, 1u);
  ASSERT_EQ(d.head.envc, 1u);
  EXPECT_STREQ(d.view.envp[0], "B=x");
  ASSERT_EQ(d.head.nfiles, 1u);
  EXPECT_EQ(d.table[0].len, 3u);
  EXPECT_EQ(d.bytes, "abc");
  EXPECT_EQ(d.head.ncollect, 0u);
  EXPECT_EQ(d.head.limits.cpu_s, 0u);
  EXPECT_EQ(d.head.limits.nofile, 0u);
}

TEST(NativeRequest, AFileWithoutANameTakesItsBytesAlong) {
  Decoded d;
  Decode(EncodeNativeRequest(
             {{"argv", {"true"}}, {"files", {{{"len", 1}}, {{"name", "b"}, {"len", 2}}}}}, "xyz"),
         &d);
  ASSERT_EQ(d.error, nullptr);
  ASSERT_EQ(d.head.nfiles, 1u);
  EXPECT_STREQ(d.view.file_names[0], "b");
  EXPECT_EQ(d.bytes, "yz");
}

TEST(NativeRequest, PidOneRefusesWhatDoesNotAddUp) {
  const std::string good = EncodeNativeRequest({{"argv", {"true"}}}, "");
  NativeRequestHead h;
  memcpy(&h, good.data(), sizeof h);
  std::string strings = good.substr(sizeof h, h.strings_len);
  std::vector<char*> ptrs(NativeRequestPointers(h));
  NativeRequestView v;
  EXPECT_EQ(SplitNativeRequest(h, strings.data(), ptrs.data(), ptrs.size(), &v), nullptr);

  NativeRequestHead bad = h;
  bad.magic = 0;
  EXPECT_STREQ(SplitNativeRequest(bad, strings.data(), ptrs.data(), ptrs.size(), &v),
               "not a native request");
  bad = h;
  bad.argc = 0;
  EXPECT_STREQ(SplitNativeRequest(bad, strings.data(), ptrs.data(), ptrs.size(), &v), "empty argv");
  bad = h;
  bad.envc = 1;  // one more string than there is
  std::vector<char*> more(NativeRequestPointers(bad));
  EXPECT_STREQ(SplitNativeRequest(bad, strings.data(), more.data(), more.size(), &v),
               "garbled request strings");
  bad = h;
  strings.back() = 'x';  // the last string without its end
  EXPECT_STREQ(SplitNativeRequest(bad, strings.data(), ptrs.data(), ptrs.size(), &v),
               "garbled request strings");
  strings.back() = '\0';
  bad.argc = kNativeRequestMaxItems + 1;
  EXPECT_STREQ(SplitNativeRequest(bad, strings.data(), ptrs.data(), ptrs.size(), &v),
               "too many strings in the request");
  EXPECT_STREQ(SplitNativeRequest(h, strings.data(), ptrs.data(), ptrs.size() - 1, &v),
               "too many strings in the request");
}

TEST(NativeRequest, AStringWithANulIsCutThere) {
  Decoded d;
  Decode(EncodeNativeRequest({{"argv", {std::string("ab\0cd", 5), "e"}}}, ""), &d);
  ASSERT_EQ(d.error, nullptr);
  EXPECT_STREQ(d.view.argv[0], "ab");
  EXPECT_STREQ(d.view.argv[1], "e");
}

}  // namespace
}  // namespace warren::agent
