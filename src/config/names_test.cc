// Copyright tollgate authors.
#include "src/config/names.h"

#include <string>

#include "gtest/gtest.h"

namespace tollgate::config_internal {
namespace {

TEST(LimitNameTest, AcceptsLettersDigitsUnderscoreDotDash) {
  EXPECT_EQ(LimitNameProblem("api_per_user"), "");
  EXPECT_EQ(LimitNameProblem("Tiffin.orders-v2"), "");
  EXPECT_EQ(LimitNameProblem("x"), "");
  EXPECT_EQ(LimitNameProblem(std::string(kMaxLimitNameBytes, 'a')), "");
}

TEST(LimitNameTest, RefusesEmptyLongAndOddCharacters) {
  EXPECT_NE(LimitNameProblem(""), "");
  EXPECT_NE(LimitNameProblem(std::string(kMaxLimitNameBytes + 1, 'a')), "");
  for (const char* name : {"a b", "a/b", "a:b", "a{b}", "naïve", "a\nb", "a*"}) {
    EXPECT_NE(LimitNameProblem(name), "") << name;
  }
}

TEST(ClosestNameTest, SuggestsOnlyLikelyTypos) {
  constexpr absl::string_view kKeys[] = {"capacity", "refill_per_second", "limit", "window"};
  EXPECT_EQ(ClosestName("capcity", kKeys), "capacity");
  EXPECT_EQ(ClosestName("widnow", kKeys), "window");
  EXPECT_EQ(ClosestName("limits", kKeys), "limit");
  EXPECT_EQ(ClosestName("refill", kKeys), "");
  EXPECT_EQ(ClosestName("burst", kKeys), "");
  EXPECT_EQ(ClosestName("", kKeys), "");
}

}  // namespace
}  // namespace tollgate::config_internal
