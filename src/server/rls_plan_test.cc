// Copyright tollgate authors. Envoy requests planned, checked in one store call and rendered,
// without gRPC: overrides, shadow rules, block lists and the statuses of refused requests.
#include "src/server/rls_plan.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"

namespace tollgate::server {
namespace {

using Status = RateLimitResponse::DescriptorStatus;

constexpr char kConfig[] = R"(domain: plan
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: file
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: "docs/*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: half_minute
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 1}
  - key: banned_half_minute
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 0}
  # envoyproxy/ratelimit's own example of `metadata` (examples/ratelimit/config/example.yaml).
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
        tier: 2
      owner: payments
  - key: tagged
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      owner: search
  - key: free
    rate_limit: {unlimited: true}
    metadata:
      owner: nobody
)";

struct Descriptor {
  std::string key;
  std::string value;
  uint32_t override_per_minute = 0;  // > 0: a `limit` override
};

RateLimitRequest Request(const std::vector<Descriptor>& descriptors) {
  RateLimitRequest request;
  request.set_domain("plan");
  for (const Descriptor& d : descriptors) {
    auto* descriptor = request.add_descriptors();
    auto* entry = descriptor->add_entries();
    entry->set_key(d.key);
    entry->set_value(d.value);
    if (d.override_per_minute > 0) {
      descriptor->mutable_limit()->set_requests_per_unit(d.override_per_minute);
      descriptor->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
    }
  }
  return request;
}

class RlsPlanTest : public ::testing::Test {
 protected:
  RlsPlanTest() {
    absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kConfig, "plan.yaml");
    EXPECT_TRUE(config.ok()) << config.status();
    std::vector<EnvoyDomainConfig> domains;
    domains.push_back(*std::move(config));
    auto matcher = DescriptorMatcher::Create(std::move(domains));
    EXPECT_TRUE(matcher.ok()) << matcher.status();
    matcher_ = *std::move(matcher);
    auto limiter = Limiter::Create({.limits = matcher_->limits(), .clock = &clock_});
    EXPECT_TRUE(limiter.ok()) << limiter.status();
    limiter_ = *std::move(limiter);
  }

  absl::StatusOr<RlsPlan> Plan(const RateLimitRequest& request, bool global_shadow = false) {
    return PlanRateLimit(request, *matcher_, *limiter_, &overrides_,
                         {.global_shadow = global_shadow,
                          .global_quota = global_quota_,
                          .dynamic_metadata = dynamic_metadata_,
                          .descriptor_hits_are_reports = descriptor_hits_are_reports_,
                          .max_descriptors = 8});
  }

  // Plans, checks the counted descriptors in one Limiter call (counted in `store_calls_`)
  // and renders.
  RateLimitResponse Answer(const RateLimitRequest& request, bool global_shadow = false) {
    absl::StatusOr<RlsPlan> plan = Plan(request, global_shadow);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    if (!plan->counted.empty()) {
      std::vector<CheckRequest> requests = TakeCheckRequests(*plan);
      ++store_calls_;
      std::optional<absl::StatusOr<MultiDecision>> result;
      limiter_->CheckAllAsync(std::move(requests),
                              [&](absl::StatusOr<MultiDecision> r) { result = std::move(r); });
      EXPECT_TRUE(result.has_value()) << "the memory store answers inline";
      EXPECT_TRUE(result->ok()) << result->status();
      for (size_t j = 0; j < plan->counted.size(); ++j) {
        plan->descriptors[plan->counted[j]].decision = (**result).decisions[j];
      }
    }
    RateLimitResponse response;
    RenderRateLimitResponse(*plan, clock_.NowMicros(), /*headers=*/true, &response);
    return response;
  }

  // What `key=value` has left, without counting.
  uint32_t Remaining(const std::string& key, const std::string& value) {
    RateLimitRequest request = Request({{key, value}});
    request.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
    return Answer(request).statuses(0).limit_remaining();
  }

  // 20.5 s into a minute.
  SimulatedClock clock_{1'700'000'040'000'000 + 20'500'000};
  std::unique_ptr<DescriptorMatcher> matcher_;
  std::unique_ptr<Limiter> limiter_;
  OverrideLimits overrides_{2};
  // The service's QUOTA_MODE and RESPONSE_DYNAMIC_METADATA.
  bool global_quota_ = false;
  bool dynamic_metadata_ = false;
  // false: the service's --descriptor-hits-are-requests.
  bool descriptor_hits_are_reports_ = true;
  int store_calls_ = 0;
  // Answers whose bytes were written without the message (and checked against it).
};

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
