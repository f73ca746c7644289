// Copyright tollgate authors. The answers to Envoy requests (planned, checked in one store call
// and rendered, without gRPC): statuses of refused requests, reset times, quota mode, a
// fail_closed refusal and dynamic metadata.
#include "src/server/rls_render.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/rls_plan_test_fixture.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"

namespace tollgate::server {
namespace {

using Status = RateLimitResponse::DescriptorStatus;
using rls_plan_testing::Request;
using rls_plan_testing::RlsPlanTest;

TEST_F(RlsPlanTest, StatusesOfARefusedRequestSayWhatIsReallyLeft) {
  // As envoyproxy/ratelimit's tests expect: the over-limit descriptor reports 0, the others
  // what they have (nothing was taken from them: tollgate's refusal spends nothing).
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  for (int i = 0; i < 2; ++i) {
    RateLimitResponse refused = Answer(Request({{"ip", "1"}, {"user", "a"}}));
    ASSERT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OK);
    EXPECT_EQ(refused.statuses(0).limit_remaining(), 10u) << i;  // not 9
    EXPECT_EQ(refused.statuses(1).code(), RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(refused.statuses(1).limit_remaining(), 0u);
  }
  // A cost larger than what is left (1 left, 2 asked): OVER_LIMIT with remaining 0.
  ASSERT_EQ(Answer(Request({{"ip", "2"}})).overall_code(), RateLimitResponse::OK);
  RateLimitRequest big = Request({{"user", "b"}});
  big.set_hits_addend(3);
  RateLimitResponse over = Answer(big);
  EXPECT_EQ(over.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 0u);
}

TEST_F(RlsPlanTest, DurationUntilResetIsWholeSecondsRoundedUp) {
  RateLimitResponse response = Answer(Request({{"user", "a"}, {"second", "s"}, {"banned", "b"}}));
  // 20.5 s into the minute: 39.5 s left -> 40; 0.5 s of the second -> 1.
  EXPECT_EQ(response.statuses(0).duration_until_reset().seconds(), 40);
  EXPECT_EQ(response.statuses(0).duration_until_reset().nanos(), 0);
  EXPECT_EQ(response.statuses(1).duration_until_reset().seconds(), 1);
  EXPECT_EQ(response.statuses(1).duration_until_reset().nanos(), 0);
  EXPECT_EQ(response.statuses(2).duration_until_reset().seconds(), 40);
  EXPECT_EQ(response.statuses(2).duration_until_reset().nanos(), 0);
}

TEST_F(RlsPlanTest, AFailClosedRefusalSaysTheOutageNotTheWindow) {
  // What the resilient store answers for a fail_closed limit while Redis is unreachable.
  absl::StatusOr<RlsPlan> plan = Plan(Request({{"user", "a"}, {"ip", "1"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->counted.size(), 2u);
  Decision unavailable;
  unavailable.allowed = false;
  unavailable.reason = DenyReason::kStoreUnavailable;
  unavailable.retry_after_micros = 1'200'000;
  unavailable.reset_after_micros = 0;
  Decision open_share;
  open_share.allowed = true;
  open_share.remaining = 3;
  open_share.reset_after_micros = 39'500'000;
  plan->descriptors[plan->counted[0]].decision = unavailable;
  plan->descriptors[plan->counted[1]].decision = open_share;
  RateLimitResponse response;
  RenderRateLimitResponse(*plan, clock_.NowMicros(), /*headers=*/true, &response);
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(response.statuses(0).duration_until_reset().seconds(), 2);  // 1.2 s, rounded up
  EXPECT_EQ(response.statuses(1).duration_until_reset().seconds(), 40);
  const auto& fields = response.dynamic_metadata().fields();
  ASSERT_TRUE(fields.contains("reason"));
  EXPECT_EQ(fields.at("reason").string_value(), "store_unavailable");
  EXPECT_EQ(fields.at("limit").string_value(), plan->descriptors[plan->counted[0]].limit->name);
  EXPECT_TRUE(RefusedForStoreUnavailable(response));

  // With the request's dynamic metadata asked for, the reason joins it.
  dynamic_metadata_ = true;
  plan = Plan(Request({{"user", "a"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->descriptors[plan->counted[0]].decision = unavailable;
  RateLimitResponse merged;
  RenderRateLimitResponse(*plan, clock_.NowMicros(), /*headers=*/true, &merged);
  const auto& merged_fields = merged.dynamic_metadata().fields();
  EXPECT_EQ(merged_fields.at("reason").string_value(), "store_unavailable");
  EXPECT_EQ(merged_fields.at("domain").string_value(), "plan");
  EXPECT_TRUE(RefusedForStoreUnavailable(merged));
  dynamic_metadata_ = false;

  // An ordinary refusal carries no such reason.
  ASSERT_EQ(Answer(Request({{"user", "b"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "b"}})).overall_code(), RateLimitResponse::OK);
  RateLimitResponse over = Answer(Request({{"user", "b"}}));
  ASSERT_EQ(over.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_TRUE(over.dynamic_metadata().fields().empty());
  EXPECT_FALSE(RefusedForStoreUnavailable(over));
}

TEST_F(RlsPlanTest, QuotaDescriptorsRefuseOnlyWhenAllOfThemAreOver) {
  ASSERT_EQ(Answer(Request({{"quota_a", "t"}})).overall_code(), RateLimitResponse::OK);
  // quota_a is spent, quota_b is not: the request passes, quota_a still reports OVER_LIMIT.
  RateLimitResponse one_over = Answer(Request({{"quota_a", "t"}, {"quota_b", "t"}}));
  EXPECT_EQ(one_over.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(one_over.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(one_over.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(one_over.statuses(1).code(), RateLimitResponse::OK);
  // Both spent: refused.
  RateLimitResponse all_over = Answer(Request({{"quota_a", "t"}, {"quota_b", "t"}}));
  EXPECT_EQ(all_over.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(all_over.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(all_over.statuses(1).code(), RateLimitResponse::OVER_LIMIT);
  // A quota descriptor over its limit beside a rate-limit descriptor that passes: the
  // request passes unless every quota descriptor is over, and then it is refused.
  RateLimitResponse mixed = Answer(Request({{"ip", "q"}, {"quota_a", "t"}}));
  EXPECT_EQ(mixed.overall_code(), RateLimitResponse::OVER_LIMIT);
  RateLimitResponse with_fresh = Answer(Request({{"ip", "q"}, {"quota_a", "t"}, {"quota_b", "u"}}));
  EXPECT_EQ(with_fresh.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(with_fresh.statuses(1).code(), RateLimitResponse::OVER_LIMIT);
  // A rate-limit descriptor over its limit refuses whatever the quotas say.
  ASSERT_EQ(Answer(Request({{"user", "z"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "z"}})).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Answer(Request({{"user", "z"}, {"quota_b", "v"}})).overall_code(),
            RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("quota_b", "v"), 1u);  // the refusal spent nothing of the quota
}

TEST_F(RlsPlanTest, NoDynamicMetadataUnlessAskedFor) {
  RateLimitResponse response = Answer(Request({{"tagged", "x"}}));
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_FALSE(response.has_dynamic_metadata());
}

TEST_F(RlsPlanTest, DynamicMetadataCarriesTheRequestAndThePassedRulesMetadata) {
  dynamic_metadata_ = true;
  // As envoyproxy/ratelimit's example: both quotas pass; service_1's name is first and stays,
  // the maps merge, and service_2's other keys join.
  RateLimitRequest request = Request({{"service", "service_1"}, {"service", "service_2"}});
  request.set_hits_addend(1);
  RateLimitResponse both = Answer(request);
  EXPECT_EQ(both.overall_code(), RateLimitResponse::OK);
  const auto& fields = both.dynamic_metadata().fields();
  EXPECT_EQ(fields.at("domain").string_value(), "plan");
  EXPECT_EQ(fields.at("hitsAddend").number_value(), 1);
  const auto& descriptors = fields.at("descriptors").list_value();
  ASSERT_EQ(descriptors.values_size(), 2);
  EXPECT_EQ(descriptors.values(1)
                .struct_value()
                .fields()
                .at("entries")
                .list_value()
                .values(0)
                .string_value(),
            "service=service_2");
  const auto& metadata = fields.at("metadata").struct_value().fields();
  const auto& quota = metadata.at("service_with_quota").struct_value().fields();
  EXPECT_EQ(quota.at("name").string_value(), "service_1");
  EXPECT_EQ(quota.at("tier").number_value(), 2);
  EXPECT_EQ(metadata.at("owner").string_value(), "payments");

  // service_1 (1 a minute) is spent: only service_2 passed, and only its metadata is sent.
  RateLimitResponse one = Answer(Request({{"service", "service_1"}, {"service", "service_2"}}));
  EXPECT_EQ(one.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(one.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_FALSE(one.dynamic_metadata().fields().contains("hitsAddend"));
  EXPECT_EQ(one.dynamic_metadata()
                .fields()
                .at("metadata")
                .struct_value()
                .fields()
                .at("service_with_quota")
                .struct_value()
                .fields()
                .at("name")
                .string_value(),
            "service_2");

  // Both spent: refused, and no rule passed: no "metadata" key.
  RateLimitResponse none = Answer(Request({{"service", "service_1"}, {"service", "service_2"}}));
  EXPECT_EQ(none.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_TRUE(none.dynamic_metadata().fields().contains("domain"));
  EXPECT_FALSE(none.dynamic_metadata().fields().contains("metadata"));

  // An `unlimited` rule's metadata is not sent (the peer checks no limit for it); an override
  // is described in protobuf text form.
  RateLimitResponse unlimited = Answer(Request({{"free", "x"}, {"ip", "o", 7}}));
  EXPECT_FALSE(unlimited.dynamic_metadata().fields().contains("metadata"));
  EXPECT_EQ(unlimited.dynamic_metadata()
                .fields()
                .at("descriptors")
                .list_value()
                .values(1)
                .struct_value()
                .fields()
                .at("limit")
                .string_value(),
            "requests_per_unit: 7 unit: MINUTE");
}

TEST_F(RlsPlanTest, GlobalQuotaModeRefusesOnlyWhenEveryDescriptorIsOver) {
  global_quota_ = true;
  ASSERT_EQ(Answer(Request({{"user", "q"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "q"}})).overall_code(), RateLimitResponse::OK);
  // user q (2 a minute) is spent, ip q is not: the request passes, user q reports OVER_LIMIT.
  RateLimitResponse one_over = Answer(Request({{"user", "q"}, {"ip", "q"}}));
  EXPECT_EQ(one_over.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(one_over.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("ip", "q"), 9u);  // the passing one was counted
  // As the peer: a descriptor without a rule is a quota descriptor that passes.
  EXPECT_EQ(Answer(Request({{"user", "q"}, {"no_rule", "x"}})).overall_code(),
            RateLimitResponse::OK);
  // Alone, over its limit: refused; a blocked rule too.
  EXPECT_EQ(Answer(Request({{"user", "q"}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Answer(Request({{"banned", "b"}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  // Without global quota mode the same request is refused by the spent rate limit.
  global_quota_ = false;
  EXPECT_EQ(Answer(Request({{"user", "q"}, {"ip", "q"}})).overall_code(),
            RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsPlanTest, UnitMultiplierWindowsResetAtTheirOwnLength) {
  // 20.5 s into a minute is 20.5 s into a 30 s window: 9.5 s left -> 10.
  RateLimitResponse first = Answer(Request({{"half_minute", "h"}}));
  EXPECT_EQ(first.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(first.statuses(0).duration_until_reset().seconds(), 10);
  EXPECT_EQ(first.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::SECOND);
  RateLimitResponse banned = Answer(Request({{"banned_half_minute", "b"}}));
  EXPECT_EQ(banned.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(banned.statuses(0).duration_until_reset().seconds(), 10);
  EXPECT_EQ(Answer(Request({{"half_minute", "h"}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  clock_.AdvanceMicros(9'000'000);  // 29.5 s: still the same window
  EXPECT_EQ(Answer(Request({{"half_minute", "h"}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  clock_.AdvanceMicros(1'000'000);  // 30.5 s: the next window
  EXPECT_EQ(Answer(Request({{"half_minute", "h"}})).overall_code(), RateLimitResponse::OK);
}

}  // namespace
}  // namespace tollgate::server
