// Copyright tollgate authors.
#include "src/core/limit_problems.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

Limit Window(std::string name) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers = {.algorithm = Algorithm::kFixedWindow, .limit = 10, .window_micros = 1'000'000};
  return limit;
}

TEST(ValidateLimitTest, AValidLimitHasNoProblems) {
  EXPECT_TRUE(ValidateLimit(Window("w")).ok());
  EXPECT_TRUE(internal::LimitProblems(Window("w")).empty());
}

TEST(ValidateLimitTest, EachProblemNamesItsField) {
  Limit limit = Window("otp");
  limit.numbers.limit = 0;
  limit.on_store_failure = FailureMode::kLocal;
  std::vector<internal::LimitProblem> problems = internal::LimitProblems(limit);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].field, "limit");
  EXPECT_EQ(problems[1].field, "local");
  const absl::Status status = ValidateLimit(limit);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("limit 'otp': limit: expected a whole number from 1 to 1000000000000, "
                        "got '0'; local: required with on_store_failure: local"));
}

// The rule the YAML applies holds for a library user too: sync mode with fail_closed needs
// the explicit opt-in, wherever the limit comes from.
TEST(ValidateLimitTest, SyncWithFailClosedNeedsTheOptIn) {
  Limit limit = Window("guesses");
  limit.mode = Mode::kSync;
  limit.sync_interval_micros = 100'000;
  limit.on_store_failure = FailureMode::kFailClosed;
  EXPECT_THAT(std::string(ValidateLimit(limit).message()),
              HasSubstr("mode: sync mode admits a bounded overshoot"));
  EXPECT_FALSE(Limiter::Create({.limits = {limit}}).ok());
  limit.allow_sync_with_fail_closed = true;
  EXPECT_TRUE(ValidateLimit(limit).ok());
  EXPECT_TRUE(Limiter::Create({.limits = {limit}}).ok());
}

TEST(ValidateLimitTest, SyncModeTakesWindowsWithAnIntervalWithinTheWindow) {
  Limit bucket;
  bucket.name = "b";
  bucket.numbers = {.algorithm = Algorithm::kTokenBucket, .capacity = 5, .refill_per_second = 1};
  bucket.mode = Mode::kSync;
  EXPECT_THAT(std::string(ValidateLimit(bucket).message()),
              HasSubstr("got mode 'sync' with algorithm token_bucket"));
  Limit window = Window("w");
  window.mode = Mode::kSync;
  window.sync_interval_micros = 2'000'000;
  EXPECT_THAT(std::string(ValidateLimit(window).message()),
              HasSubstr("sync_interval: expected at most the window (1s), got '2s'"));
  window.sync_interval_micros = 5'000;
  EXPECT_THAT(std::string(ValidateLimit(window).message()),
              HasSubstr("sync_interval: expected a duration from 10ms, got '5ms'"));
}

TEST(ValidateLimitTest, LocalNumbersMatchTheLimitsKind) {
  Limit slots;
  slots.name = "slots";
  slots.numbers = {.algorithm = Algorithm::kConcurrency, .limit = 4, .window_micros = 30'000'000};
  slots.on_store_failure = FailureMode::kLocal;
  slots.local = Window("x").numbers;
  EXPECT_THAT(std::string(ValidateLimit(slots).message()),
              HasSubstr("local.algorithm: a concurrency limit's local limit holds leases too"));
  slots.local = slots.numbers;
  EXPECT_TRUE(ValidateLimit(slots).ok());
}

TEST(ValidateLimitTest, ABucketMustFillWithinAYear) {
  Limit bucket;
  bucket.name = "slow";
  bucket.numbers = {
      .algorithm = Algorithm::kTokenBucket, .capacity = 100, .refill_per_second = 1e-6};
  EXPECT_THAT(std::string(ValidateLimit(bucket).message()),
              HasSubstr("refill_per_second: expected a rate that refills the bucket within 365d"));
}

TEST(FormatDurationTest, TheLargestUnitThatDividesEvenly) {
  EXPECT_EQ(internal::FormatDuration(90'000'000), "90s");
  EXPECT_EQ(internal::FormatDuration(600'000'000), "10m");
  EXPECT_EQ(internal::FormatDuration(1'500), "1500us");
  EXPECT_EQ(internal::FormatDuration(0), "0us");
}

}  // namespace
}  // namespace tollgate
