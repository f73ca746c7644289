// Copyright tollgate authors.
#include "src/rlqs/assign.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/algorithm/share.h"

namespace tollgate::rlqs {

std::vector<int64_t> SplitGrant(int64_t available, absl::Span<const RlqsShareInput> subscriptions) {
  std::vector<int64_t> fresh(subscriptions.size(), 0);
  if (subscriptions.empty() || available <= 0) return fresh;
  double fleet = 0;
  for (const RlqsShareInput& sub : subscriptions) fleet += std::max(0.0, sub.demand_per_second);
  const double scale = static_cast<double>(algorithm::kDemandFloorDivisor) *
                       static_cast<double>(subscriptions.size());
  std::vector<double> weights(subscriptions.size(), 1.0);
  double total = 0;
  for (size_t i = 0; i < subscriptions.size(); ++i) {
    if (fleet > 0) {
      weights[i] = std::max(scale * std::max(0.0, subscriptions[i].demand_per_second), fleet);
    }
    total += weights[i];
  }
  int64_t left = available;
  for (size_t i = 0; i < subscriptions.size() && left > 0; ++i) {
    if (!subscriptions[i].refresh) continue;
    const int64_t target =
        algorithm::FloorAtLeastZero(static_cast<double>(available) * weights[i] / total + 1e-9);
    fresh[i] = std::min(target, left);
    left -= fresh[i];
  }
  return fresh;
}

RlqsAssignment GrantAssignment(int64_t tokens, bool parity, int64_t ttl_seconds) {
  RlqsAssignment assignment;
  assignment.ttl_seconds = std::max<int64_t>(1, ttl_seconds);
  if (tokens <= 0) {
    assignment.strategy = RlqsAssignment::Strategy::kDenyAll;
    return assignment;
  }
  assignment.strategy = RlqsAssignment::Strategy::kTokenBucket;
  assignment.tokens = std::min<int64_t>(tokens, std::numeric_limits<uint32_t>::max());
  assignment.parity = parity;
  return assignment;
}

int64_t AssignmentTtlSeconds(int64_t reporting_interval_micros, int64_t round_micros) {
  const int64_t micros =
      2 * std::max<int64_t>(0, reporting_interval_micros) + std::max<int64_t>(0, round_micros);
  return std::max<int64_t>(1, (micros + 999'999) / 1'000'000);
}

void WriteAssignment(const RlqsAssignment& assignment, const std::string& bucket_id,
                     RlqsBucketAction* out) {
  out->mutable_bucket_id()->ParseFromString(bucket_id);
  auto* action = out->mutable_quota_assignment_action();
  action->mutable_assignment_time_to_live()->set_seconds(assignment.ttl_seconds);
  auto* strategy = action->mutable_rate_limit_strategy();
  switch (assignment.strategy) {
    case RlqsAssignment::Strategy::kAllowAll:
      strategy->set_blanket_rule(envoy::type::v3::RateLimitStrategy::ALLOW_ALL);
      break;
    case RlqsAssignment::Strategy::kDenyAll:
      strategy->set_blanket_rule(envoy::type::v3::RateLimitStrategy::DENY_ALL);
      break;
    case RlqsAssignment::Strategy::kTokenBucket: {
      auto* bucket = strategy->mutable_token_bucket();
      bucket->set_max_tokens(static_cast<uint32_t>(assignment.tokens));
      bucket->mutable_tokens_per_fill()->set_value(assignment.parity ? 2 : 1);
      // Longer than the assignment lives: the bucket holds its grant and never refills.
      bucket->mutable_fill_interval()->set_seconds(assignment.ttl_seconds + 1);
      break;
    }
  }
}

void WriteAbandon(const std::string& bucket_id, RlqsBucketAction* out) {
  out->mutable_bucket_id()->ParseFromString(bucket_id);
  out->mutable_abandon_action();
}

}  // namespace tollgate::rlqs
