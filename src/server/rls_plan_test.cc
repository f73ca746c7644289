// Copyright tollgate authors. Envoy requests planned, checked in one store call and rendered,
// without gRPC: what each descriptor becomes, overrides, shadow rules, block lists,
// share_threshold, a descriptor's hits, and requests refused before anything is counted.
#include "src/server/rls_plan.h"

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

TEST_F(RlsPlanTest, PlansEachDescriptor) {
  absl::StatusOr<RlsPlan> plan =
      Plan(Request({{"user", "a"}, {"nothing", "x"}, {"banned", "b"}, {"beta", "c"}}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->descriptors.size(), 4u);
  EXPECT_EQ(plan->descriptors[0].plan, DescriptorPlan::kCounted);
  EXPECT_EQ(plan->descriptors[0].limit, limiter_->FindLimit("plan.user"));
  EXPECT_EQ(plan->descriptors[0].key, "user=a");
  EXPECT_EQ(plan->descriptors[1].plan, DescriptorPlan::kNoRule);
  EXPECT_EQ(plan->descriptors[2].plan, DescriptorPlan::kBlocked);
  EXPECT_EQ(plan->descriptors[3].plan, DescriptorPlan::kCounted);
  EXPECT_FALSE(plan->descriptors[3].enforced);
  EXPECT_TRUE(plan->blocked);
  // Blocked: the counted descriptors are only looked at.
  EXPECT_EQ(plan->descriptors[0].cost, 0);
  EXPECT_EQ(plan->counted, (std::vector<size_t>{0, 3}));
}

TEST_F(RlsPlanTest, AnOverrideGetsAStableLimitWithoutANewLimiter) {
  const size_t limits_before = limiter_->limits().size();
  absl::StatusOr<RlsPlan> first = Plan(Request({{"user", "a", 3}}));
  absl::StatusOr<RlsPlan> second = Plan(Request({{"user", "b", 3}}));
  ASSERT_TRUE(first.ok() && second.ok());
  const PlannedDescriptor& item = first->descriptors[0];
  ASSERT_EQ(item.plan, DescriptorPlan::kCounted);
  ASSERT_NE(item.limit, nullptr);
  EXPECT_EQ(item.limit->name, "override:3/minute");
  EXPECT_EQ(item.limit->numbers.limit, 3);
  EXPECT_EQ(item.key, "plan|user=a");                   // the key carries the domain
  EXPECT_EQ(second->descriptors[0].limit, item.limit);  // the same Limit, same address
  EXPECT_EQ(limiter_->limits().size(), limits_before);
  EXPECT_EQ(overrides_.size(), 1);

  // Counted against 3 a minute, not the rule's 2.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Answer(Request({{"user", "o", 3}})).overall_code(), RateLimitResponse::OK) << i;
  }
  RateLimitResponse over = Answer(Request({{"user", "o", 3}}));
  EXPECT_EQ(over.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).current_limit().requests_per_unit(), 3u);
}

TEST_F(RlsPlanTest, OverridesBeyondTheBoundFallBackToTheRule) {
  ASSERT_NE(overrides_.Find(7, EnvoyUnit::kMinute), nullptr);
  ASSERT_NE(overrides_.Find(8, EnvoyUnit::kMinute), nullptr);
  absl::StatusOr<RlsPlan> plan = Plan(Request({{"user", "a", 9}}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->descriptors[0].limit, limiter_->FindLimit("plan.user"));
  EXPECT_EQ(plan->descriptors[0].key, "user=a");
  EXPECT_EQ(overrides_.size(), 2);
  // A known shape is still served.
  EXPECT_EQ(overrides_.Find(7, EnvoyUnit::kMinute), overrides_.Find(7, EnvoyUnit::kMinute));
}

TEST_F(RlsPlanTest, AnOverrideOfZeroBlocks) {
  RateLimitResponse response = Answer(Request({{"ip", "1", 0}, {"user", "z"}}));
  // requests_per_unit 0 via an override is no override at all (Find needs >= 1): the rule.
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  RateLimitRequest zero = Request({{"ip", "1"}});
  zero.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(0);
  zero.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
  absl::StatusOr<RlsPlan> plan = Plan(zero);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->descriptors[0].plan, DescriptorPlan::kBlocked);
  EXPECT_EQ(Answer(zero).overall_code(), RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsPlanTest, AShadowRuleIsDecidedInTheSameStoreCallAndNeverRefuses) {
  ASSERT_EQ(Answer(Request({{"beta", "x"}})).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Remaining("beta", "x"), 0u);
  store_calls_ = 0;

  // beta is over its limit; user is counted anyway, in one store call.
  RateLimitResponse response = Answer(Request({{"user", "a"}, {"beta", "x"}}));
  EXPECT_EQ(store_calls_, 1);
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(response.statuses(1).code(), RateLimitResponse::OK);  // shadow: reported, not enforced
  EXPECT_EQ(Remaining("user", "a"), 1u);

  // A shadow rule that passes is counted with the others.
  ASSERT_EQ(Answer(Request({{"user", "b"}, {"beta", "y"}})).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Remaining("beta", "y"), 0u);
  EXPECT_EQ(Remaining("user", "b"), 1u);
}

TEST_F(RlsPlanTest, AnEnforcedRefusalCountsNothingNotEvenShadowRules) {
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  RateLimitResponse refused = Answer(Request({{"user", "a"}, {"beta", "x"}, {"ip", "1"}}));
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("beta", "x"), 1u);
  EXPECT_EQ(Remaining("ip", "1"), 10u);
}

TEST_F(RlsPlanTest, GlobalShadowCountsWhatPassesAndAnswersOk) {
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"user", "a"}})).overall_code(), RateLimitResponse::OK);
  absl::StatusOr<RlsPlan> plan = Plan(Request({{"user", "a"}, {"ip", "1"}}), true);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->descriptors[0].enforced);
  EXPECT_FALSE(plan->descriptors[1].enforced);
  RateLimitResponse response = Answer(Request({{"user", "a"}, {"ip", "1"}}), true);
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OVER_LIMIT);  // as computed
  EXPECT_EQ(Remaining("ip", "1"), 9u);  // counted: the user's refusal is only shadow
}

TEST_F(RlsPlanTest, ShareThresholdValuesShareOneCounter) {
  // As envoyproxy/ratelimit's share_threshold tests: files/a and files/b count together.
  ASSERT_EQ(Answer(Request({{"file", "files/a"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"file", "files/b"}})).overall_code(), RateLimitResponse::OK);
  RateLimitResponse third = Answer(Request({{"file", "files/c"}}));
  EXPECT_EQ(third.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(third.statuses(0).current_limit().requests_per_unit(), 2u);
  // Without share_threshold, each value has its own counter.
  ASSERT_EQ(Answer(Request({{"file", "docs/a"}})).overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(Answer(Request({{"file", "docs/a"}})).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Answer(Request({{"file", "docs/a"}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("file", "docs/b"), 2u);
}

TEST_F(RlsPlanTest, DescriptorHitsAreRequestsWhenAskedAndARefusalSpendsNothing) {
  // user: 2 a minute. A descriptor's own hits_addend of 1, then 2, then 1.
  auto hits = [](const std::string& user, uint64_t n) {
    RateLimitRequest request = Request({{"user", user}});
    request.mutable_descriptors(0)->mutable_hits_addend()->set_value(n);
    return request;
  };
  descriptor_hits_are_reports_ = false;
  absl::StatusOr<RlsPlan> plan = Plan(hits("h", 2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->descriptors[0].report);
  EXPECT_EQ(Answer(hits("h", 1)).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Answer(hits("h", 2)).overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("user", "h"), 1u);  // the refusal spent nothing
  EXPECT_EQ(Answer(hits("h", 1)).overall_code(), RateLimitResponse::OK);

  // As reports (the default), the second is charged in full and leaves the limit in debt.
  descriptor_hits_are_reports_ = true;
  EXPECT_EQ(Answer(hits("r", 1)).overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Answer(hits("r", 2)).overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Remaining("user", "r"), 0u);
  EXPECT_EQ(Answer(hits("r", 1)).overall_code(), RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsPlanTest, BadRequestsAreRefusedBeforeAnythingIsCounted) {
  RateLimitRequest empty_key = Request({{"user", "a"}, {"", "x"}});
  EXPECT_EQ(Plan(empty_key).status().code(), absl::StatusCode::kInvalidArgument);
  RateLimitRequest many;
  many.set_domain("plan");
  for (int i = 0; i < 9; ++i) many.add_descriptors()->add_entries()->set_key("user");
  EXPECT_EQ(Plan(many).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Remaining("user", "a"), 2u);
  RateLimitRequest unknown = Request({{"user", "a"}});
  unknown.set_domain("elsewhere");
  absl::StatusOr<RlsPlan> plan = Plan(unknown);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->known_domain);
  EXPECT_TRUE(plan->counted.empty());
}

}  // namespace
}  // namespace tollgate::server
