// Copyright tollgate authors.
#include "src/server/ratelimit_headers.h"

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

TEST(RateLimitHeadersTest, RoundsTimesUp) {
  EXPECT_EQ(CeilMillis(0), 0);
  EXPECT_EQ(CeilMillis(1), 1);
  EXPECT_EQ(CeilMillis(1000), 1);
  EXPECT_EQ(CeilMillis(1001), 2);
  EXPECT_EQ(CeilSeconds(-5), 0);
  EXPECT_EQ(CeilSeconds(1), 1);
  EXPECT_EQ(CeilSeconds(1'000'000), 1);
  EXPECT_EQ(CeilSeconds(1'000'001), 2);
}

TEST(RateLimitHeadersTest, TokenBucketPolicyWindowIsTheRefillTime) {
  LimitNumbers bucket{.algorithm = Algorithm::kTokenBucket, .capacity = 10, .refill_per_second = 5};
  EXPECT_EQ(PolicyItem(bucket), "10;w=2");
  bucket.refill_per_second = 3;  // 3.33 s rounds up
  EXPECT_EQ(PolicyItem(bucket), "10;w=4");
  bucket.refill_per_second = 100;  // under a second is still at least 1
  EXPECT_EQ(PolicyItem(bucket), "10;w=1");
}

TEST(RateLimitHeadersTest, WindowPolicyIsTheWindowLength) {
  LimitNumbers window{
      .algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 600'000'000};
  EXPECT_EQ(PolicyItem(window), "3;w=600");
  window.algorithm = Algorithm::kSlidingWindow;
  window.window_micros = 500'000;
  EXPECT_EQ(PolicyItem(window), "3;w=1");
}

TEST(RateLimitHeadersTest, RateLimitFieldCarriesLimitRemainingAndReset) {
  Decision decision{.allowed = true, .limit = 10, .remaining = 9, .reset_after_micros = 200'000};
  EXPECT_EQ(RateLimitField(decision), "limit=10, remaining=9, reset=1");
}

TEST(RateLimitHeadersTest, RetryAfterOnlyWhenARetryCanPass) {
  Decision allowed{.allowed = true, .limit = 1};
  EXPECT_EQ(RetryAfterSeconds(allowed), std::nullopt);

  Decision over{.allowed = false,
                .limit = 1,
                .retry_after_micros = 1'500'000,
                .reason = DenyReason::kOverLimit};
  EXPECT_EQ(RetryAfterSeconds(over), 2);
  over.retry_after_micros = 10;  // never "0": a client must wait at least a second
  EXPECT_EQ(RetryAfterSeconds(over), 1);

  Decision never{.allowed = false,
                 .limit = 1,
                 .retry_after_micros = 0,
                 .reason = DenyReason::kCostExceedsLimit};
  EXPECT_EQ(RetryAfterSeconds(never), std::nullopt);
}

TEST(RateLimitHeadersTest, LocalFallbackUsesTheLocalNumbers) {
  Limit limit;
  limit.numbers = {.algorithm = Algorithm::kTokenBucket, .capacity = 100, .refill_per_second = 10};
  limit.on_store_failure = FailureMode::kLocal;
  limit.local =
      LimitNumbers{.algorithm = Algorithm::kFixedWindow, .limit = 5, .window_micros = 60'000'000};
  Decision from_store{.source = DecisionSource::kMemory};
  Decision from_fallback{.source = DecisionSource::kFallback};
  EXPECT_EQ(PolicyItem(DecidingNumbers(limit, from_store)), "100;w=10");
  EXPECT_EQ(PolicyItem(DecidingNumbers(limit, from_fallback)), "5;w=60");
}

}  // namespace
}  // namespace tollgate::server
