// Copyright tollgate authors.
#include "src/server/ratelimit_headers.h"

#include <optional>
#include <vector>

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

// A concurrency limit's quota is leases in flight, not units per window: the draft's quota
// unit instead of a window.
TEST(RateLimitHeadersTest, ConcurrencyPolicyIsConcurrentRequests) {
  LimitNumbers slots{.algorithm = Algorithm::kConcurrency, .limit = 5, .window_micros = 30'000'000};
  EXPECT_EQ(PolicyListItem("gpu", slots), "\"gpu\";q=5;qu=\"concurrent-requests\"");
  EXPECT_EQ(PolicyItem(slots), "5");
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

TEST(RateLimitHeadersTest, FormatNamesParse) {
  EXPECT_EQ(ParseRateLimitHeaderFormat("draft11"), RateLimitHeaderFormat::kDraft11);
  EXPECT_EQ(ParseRateLimitHeaderFormat("draft-07"), RateLimitHeaderFormat::kDraft07);
  EXPECT_EQ(ParseRateLimitHeaderFormat("none"), RateLimitHeaderFormat::kNone);
  EXPECT_EQ(ParseRateLimitHeaderFormat("draft03"), std::nullopt);
  for (auto format : {RateLimitHeaderFormat::kDraft11, RateLimitHeaderFormat::kDraft07,
                      RateLimitHeaderFormat::kNone}) {
    EXPECT_EQ(ParseRateLimitHeaderFormat(RateLimitHeaderFormatName(format)), format);
  }
}

TEST(RateLimitHeadersTest, PolicyNamesAreEscapedStructuredFieldStrings) {
  EXPECT_EQ(StructuredFieldString("api.v1-read_x"), R"("api.v1-read_x")");
  EXPECT_EQ(StructuredFieldString(R"(a"b\c)"), R"("a\"b\\c")");
  // A String holds printable ASCII only: a control byte or UTF-8 cannot be sent as is.
  EXPECT_EQ(StructuredFieldString("tab\there\xc3\xa9"), R"("tab?here??")");
  EXPECT_EQ(StructuredFieldString(""), R"("")");
}

TEST(RateLimitHeadersTest, Draft11ItemsNameThePolicy) {
  LimitNumbers bucket{.algorithm = Algorithm::kTokenBucket, .capacity = 10, .refill_per_second = 5};
  EXPECT_EQ(PolicyListItem("default", bucket), R"("default";q=10;w=2)");
  Decision decision{.allowed = true, .limit = 10, .remaining = 9, .reset_after_micros = 200'000};
  EXPECT_EQ(ServiceLimitItem("default", decision), R"("default";r=9;t=1)");
  decision.remaining = -3;  // in debt after a charge: nothing is available
  EXPECT_EQ(ServiceLimitItem("default", decision), R"("default";r=0;t=1)");
}

TEST(RateLimitHeadersTest, Draft11HasOneItemPerLimitOfABatch) {
  Limit per_second;
  per_second.name = "per-second";
  per_second.numbers = {
      .algorithm = Algorithm::kFixedWindow, .limit = 5, .window_micros = 1'000'000};
  Limit daily;
  daily.name = "daily";
  daily.numbers = {
      .algorithm = Algorithm::kFixedWindow, .limit = 1000, .window_micros = 86'400'000'000};
  // daily checked under two keys: the one with less left speaks for it.
  std::vector<const Limit*> limits = {&daily, &per_second, &daily};
  std::vector<Decision> decisions = {
      {.allowed = true, .limit = 1000, .remaining = 900, .reset_after_micros = 3'600'000'000},
      {.allowed = true, .limit = 5, .remaining = 1, .reset_after_micros = 400'000},
      {.allowed = true, .limit = 1000, .remaining = 10, .reset_after_micros = 7'200'000'000}};
  RateLimitFields fields =
      RateLimitHeaderFields(RateLimitHeaderFormat::kDraft11, limits, decisions, /*top=*/1);
  EXPECT_EQ(fields.policy, R"("per-second";q=5;w=1, "daily";q=1000;w=86400)");
  EXPECT_EQ(fields.rate_limit, R"("per-second";r=1;t=1, "daily";r=10;t=7200)");

  fields = RateLimitHeaderFields(RateLimitHeaderFormat::kDraft07, limits, decisions, 1);
  EXPECT_EQ(fields.policy, "5;w=1, 1000;w=86400");
  EXPECT_EQ(fields.rate_limit, "limit=5, remaining=1, reset=1");

  fields = RateLimitHeaderFields(RateLimitHeaderFormat::kNone, limits, decisions, 1);
  EXPECT_EQ(fields.policy, "");
  EXPECT_EQ(fields.rate_limit, "");
}

TEST(RateLimitHeadersTest, XRateLimitFieldsAsEnvoysDraft03Option) {
  EXPECT_EQ(XRateLimitHeaderFields({}), std::nullopt);
  // The example of Envoy's own test: the least remaining gives Remaining and Reset.
  std::vector<DescriptorLimitStatus> statuses = {{.requests_per_unit = 1,
                                                  .unit_seconds = 60,
                                                  .name = "first",
                                                  .limit_remaining = 2,
                                                  .reset_seconds = 3},
                                                 {.requests_per_unit = 4,
                                                  .unit_seconds = 3600,
                                                  .name = "second",
                                                  .limit_remaining = 5,
                                                  .reset_seconds = 6}};
  std::optional<XRateLimitFields> fields = XRateLimitHeaderFields(statuses);
  ASSERT_TRUE(fields.has_value());
  EXPECT_EQ(fields->limit, R"(1, 1;w=60;name="first", 4;w=3600;name="second")");
  EXPECT_EQ(fields->remaining, "2");
  EXPECT_EQ(fields->reset, "3");

  statuses[0].name = "";
  statuses[1].limit_remaining = 0;
  fields = XRateLimitHeaderFields(statuses);
  EXPECT_EQ(fields->limit, R"(4, 1;w=60, 4;w=3600;name="second")");
  EXPECT_EQ(fields->remaining, "0");
  EXPECT_EQ(fields->reset, "6");
}

}  // namespace
}  // namespace tollgate::server
