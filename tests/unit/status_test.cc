#include "base/status.h"

#include <gtest/gtest.h>

#include "base/size.h"

namespace warren {
namespace {

TEST(Status, NamesOperationObjectAndErrno) {
  Status st = ErrnoStatus("mount overlay", "/run/x", ENOENT);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(st.ToString(), "mount overlay `/run/x`: No such file or directory");
  EXPECT_EQ(st.Context("create sb-1").ToString(),
            "create sb-1: mount overlay `/run/x`: No such file or directory");
  EXPECT_EQ(ErrnoStatus("mkdir", "a", EEXIST).code(), Code::kConflict);
  EXPECT_EQ(ErrnoStatus("write", "a", ENOSPC).code(), Code::kQuota);
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_STREQ(CodeName(Code::kNotFound), "not_found");
}

Result<int> Half(int x) {
  if (x % 2) return Invalid("odd", std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  int h = WARREN_TRY(Half(x));
  return WARREN_TRY(Half(h));
}

TEST(Result, TryPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().object(), "3");
  EXPECT_FALSE(Result<int>().ok());  // default is an error, never a silent zero
}

TEST(ParseSize, UnitsAndGarbage) {
  EXPECT_EQ(ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(ParseSize("1G"), 1ull << 30);
  EXPECT_EQ(ParseSize("64k"), 64ull << 10);
  EXPECT_EQ(ParseSize("2GiB"), 2ull << 30);
  EXPECT_EQ(ParseSize("100"), 100u);
  EXPECT_FALSE(ParseSize(""));
  EXPECT_FALSE(ParseSize("M"));
  EXPECT_FALSE(ParseSize("12Q"));
  EXPECT_FALSE(ParseSize("99999999999999999999999"));
}

}  // namespace
}  // namespace warren
