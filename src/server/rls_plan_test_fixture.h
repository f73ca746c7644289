// Copyright tollgate authors. What rls_plan_test.cc and rls_render_test.cc share: an Envoy
// config with a rule of each kind, requests of it, and a fixture that plans a request, checks
// its counted descriptors in one Limiter call on the memory store and renders the answer.
#ifndef TOLLGATE_SRC_SERVER_RLS_PLAN_TEST_FIXTURE_H_
#define TOLLGATE_SRC_SERVER_RLS_PLAN_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/server/descriptor_matcher.h"
#include "src/config/envoy_config.h"
#include "src/server/rls_plan.h"
#include "src/server/rls_render.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"

namespace tollgate::server::rls_plan_testing {

inline constexpr char kConfig[] = R"(domain: plan
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

inline RateLimitRequest Request(const std::vector<Descriptor>& descriptors) {
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
};

}  // namespace tollgate::server::rls_plan_testing

#endif  // TOLLGATE_SRC_SERVER_RLS_PLAN_TEST_FIXTURE_H_
