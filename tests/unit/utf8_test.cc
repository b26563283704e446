#include "base/utf8.h"

#include <gtest/gtest.h>

namespace warren {
namespace {

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(SanitizeUtf8("héllo"), "héllo");
  EXPECT_EQ(SanitizeUtf8(std::string("a\xff") + "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // truncated
}

TEST(Base64, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n : {0u, 1u, 2u, 3u, 4u, 255u, 256u}) {
    std::string in = all.substr(0, n), out;
    ASSERT_TRUE(Base64Decode(Base64Encode(in), &out));
    EXPECT_EQ(out, in);
  }
  EXPECT_EQ(Base64Encode("hi"), "aGk=");
  std::string out;
  EXPECT_FALSE(Base64Decode("a$b", &out));
  EXPECT_FALSE(Base64Decode("aGk=x", &out));
}

}  // namespace
}  // namespace warren
