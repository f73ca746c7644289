// Copyright tollgate authors.
#include "src/cli/go_values.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;
using ::testing::Pair;

TEST(GoValuesTest, BoolsAreStrconvParseBools) {
  for (const char* yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    EXPECT_THAT(ParseGoBool(yes), Optional(true)) << yes;
  }
  for (const char* no : {"0", "f", "F", "FALSE", "false", "False"}) {
    EXPECT_THAT(ParseGoBool(no), Optional(false)) << no;
  }
  for (const char* neither : {"", "yes", "no", "on", "tRUE", " true", "2"}) {
    EXPECT_EQ(ParseGoBool(neither), std::nullopt) << neither;
  }
}

TEST(GoValuesTest, DurationsAreTimeParseDurations) {
  EXPECT_THAT(ParseGoDurationMicros("0"), Optional(0));
  EXPECT_THAT(ParseGoDurationMicros("10s"), Optional(10'000'000));
  EXPECT_THAT(ParseGoDurationMicros("500ms"), Optional(500'000));
  EXPECT_THAT(ParseGoDurationMicros("1m30s"), Optional(90'000'000));
  EXPECT_THAT(ParseGoDurationMicros("1.5h"), Optional(5'400'000'000));
  EXPECT_THAT(ParseGoDurationMicros("2h45m"), Optional(9'900'000'000));
  EXPECT_THAT(ParseGoDurationMicros("250us"), Optional(250));
  EXPECT_THAT(ParseGoDurationMicros("250\xC2\xB5s"), Optional(250));
  EXPECT_THAT(ParseGoDurationMicros(".5s"), Optional(500'000));
  EXPECT_THAT(ParseGoDurationMicros("1500ns"), Optional(1));
  EXPECT_THAT(ParseGoDurationMicros("-3s"), Optional(-3'000'000));
  EXPECT_THAT(ParseGoDurationMicros("+3s"), Optional(3'000'000));
  for (const char* bad : {"", "10", "s", "1x", "1 s", "1s ", ".s", "1..5s", "-", "10S"}) {
    EXPECT_EQ(ParseGoDurationMicros(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(ParseGoDurationMicros("9999999999h"), std::nullopt);
}

TEST(GoValuesTest, IntsAndFloats) {
  EXPECT_THAT(ParseGoInt("8081"), Optional(8081));
  EXPECT_THAT(ParseGoInt("-1"), Optional(-1));
  EXPECT_THAT(ParseGoInt("+7"), Optional(7));
  for (const char* bad : {"", "8081x", "0x10", " 1", "99999999999999999999"}) {
    EXPECT_EQ(ParseGoInt(bad), std::nullopt) << bad;
  }
  EXPECT_THAT(ParseGoFloat("0.5"), Optional(0.5));
  EXPECT_THAT(ParseGoFloat("1"), Optional(1.0));
  EXPECT_THAT(ParseGoFloat("1e-1"), Optional(0.1));
  for (const char* bad : {"", "half", "inf", "nan", "0x1p-2", " 1"}) {
    EXPECT_EQ(ParseGoFloat(bad), std::nullopt) << bad;
  }
}

TEST(GoValuesTest, MapsArePairsSplitAtTheirFirstColon) {
  EXPECT_THAT(*ParseGoMap(""), ElementsAre());
  EXPECT_THAT(*ParseGoMap("a:1,b:x:y"), ElementsAre(Pair("a", "1"), Pair("b", "x:y")));
  EXPECT_EQ(ParseGoMap("a:1,b"), std::nullopt);
}

}  // namespace
}  // namespace tollgate::cli
