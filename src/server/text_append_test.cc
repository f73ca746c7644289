// Copyright tollgate authors.
#include "src/server/text_append.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

TEST(TextAppendTest, IntegersReadAsAbslWritesThem) {
  for (int64_t value : {int64_t{0}, int64_t{7}, int64_t{-1}, int64_t{1000000000},
                        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    std::string out = "x=";
    AppendPieces(out, value);
    EXPECT_EQ(out, absl::StrCat("x=", value));
  }
}

TEST(TextAppendTest, PiecesGoInOrderAfterWhatWasThere) {
  std::string out = "{";
  const std::string name = "api";
  AppendPieces(out, "\"limit\":", int64_t{5}, ",\"name\":\"", name, "\",\"n\":", 3u, "}");
  EXPECT_EQ(out, R"({"limit":5,"name":"api","n":3})");
}

TEST(TextAppendTest, AnEmptyViewAddsNothing) {
  std::string out = "a";
  AppendPieces(out, std::string_view(), "b", std::string_view(), int64_t{1});
  EXPECT_EQ(out, "ab1");
}

}  // namespace
}  // namespace tollgate::server
