// Copyright tollgate authors.
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tollgate/config.h"

namespace tollgate {
namespace {

struct GoodDuration {
  const char* text;
  int64_t micros;
};

class DurationTest : public ::testing::TestWithParam<GoodDuration> {};

TEST_P(DurationTest, ParsesToMicroseconds) {
  absl::StatusOr<int64_t> micros = ParseDurationMicros(GetParam().text);
  ASSERT_TRUE(micros.ok()) << GetParam().text << ": " << micros.status();
  EXPECT_EQ(*micros, GetParam().micros) << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Units, DurationTest,
    ::testing::Values(GoodDuration{"250us", 250}, GoodDuration{"1us", 1},
                      GoodDuration{"10ms", 10'000}, GoodDuration{"500ms", 500'000},
                      GoodDuration{"1s", 1'000'000}, GoodDuration{"90s", 90'000'000},
                      GoodDuration{"10m", 600'000'000}, GoodDuration{"1h", 3'600'000'000},
                      GoodDuration{"1d", 86'400'000'000}, GoodDuration{"007s", 7'000'000},
                      // The largest whole number of days in int64 micros.
                      GoodDuration{"106751991d", 106751991 * 86'400'000'000},
                      GoodDuration{"9223372036854775807us", INT64_MAX}));

struct BadDuration {
  const char* text;
  const char* expected;  // substring of the message
};

class BadDurationTest : public ::testing::TestWithParam<BadDuration> {};

TEST_P(BadDurationTest, IsRefusedWithAReason) {
  absl::StatusOr<int64_t> micros = ParseDurationMicros(GetParam().text);
  ASSERT_FALSE(micros.ok()) << GetParam().text << " gave " << *micros;
  EXPECT_EQ(micros.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(micros.status().message());
  EXPECT_THAT(message, ::testing::HasSubstr(GetParam().expected));
  EXPECT_THAT(message, ::testing::HasSubstr(std::string("got '") + GetParam().text + "'"));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, BadDurationTest,
    ::testing::Values(
        BadDuration{"", "expected a duration"},
        BadDuration{"10", "expected a unit after the number"},
        BadDuration{"0s", "expected a positive duration"},
        BadDuration{"0us", "expected a positive duration"},
        BadDuration{"-5s", "expected a positive duration"},
        BadDuration{"1.5s", "expected a duration"}, BadDuration{"ms", "expected a duration"},
        BadDuration{"10 ms", "expected a duration"}, BadDuration{" 10ms", "expected a duration"},
        BadDuration{"10MS", "expected a duration"}, BadDuration{"10sec", "expected a duration"},
        BadDuration{"1w", "expected a duration"}, BadDuration{"+10s", "expected a duration"},
        BadDuration{"106751992d", "fits in 64-bit microseconds"},
        BadDuration{"9223372036854775808us", "fits in 64-bit microseconds"},
        BadDuration{"99999999999999999999999999s", "fits in 64-bit microseconds"}));

}  // namespace
}  // namespace tollgate
