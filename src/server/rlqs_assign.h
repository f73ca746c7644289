// Copyright tollgate authors. How a tollgate instance divides what it may admit of one
// (limit, key) among the Envoy buckets (subscriptions) that count against it, and what it
// sends each of them. Pure: no I/O, no clock, no locks.
//
// Each round gives this instance a grant: the units it may still admit in the limit's window
// beyond what is counted (from Redis' sync script: its share of what is left, weighted by
// its demand against the other instances'; or its fallback share when Redis is away). Each
// subscription j has
//   demand_j       requests per second Envoy asked of it (allowed + denied) in its last report,
//   outstanding_j  what Envoy may still admit in it without telling us: the tokens of the
//                  assignments sent, less what its reports since showed admitted,
//   refresh_j      whether it reported since its last assignment (only then does it get a new
//                  one: a fresh grant is never given before the last one's use is known).
// SplitGrant gives each refreshed subscription
//   target_j = floor(grant * w_j / sum(w)),   w_j = max(10 n * demand_j, D)   (D = sum of
//              demands, n subscriptions; every w_j = 1 when D = 0), the rule of
//              src/algorithm/share.h's DemandWeights, so a quiet bucket keeps 1/(10 n)
//   fresh_j  = min(max(0, target_j - outstanding_j), what is left of grant - sum(outstanding))
// so what this instance's Envoys may admit unreported never exceeds its grant: the fleet's
// admitted + granted stays within the limit as in sync mode (docs/sync.md), and the overshoot
// is what an Envoy admits between its report and the arrival of the assignment that follows
// it (at most its previous grant's leftover).
//
// Envoy applies a token_bucket assignment as a new bucket filled with max_tokens when it
// differs from the active one, and keeps an equal one as it is (refilled only by time). So a
// fresh grant of g tokens is sent as token_bucket{max_tokens: g, tokens_per_fill: 1 or 2,
// fill_interval: longer than its time to live}: the bucket holds exactly g and never refills
// while it lives, and tokens_per_fill alternates between grants so that each one is a changed
// strategy (a new full bucket) even when g is the same. A grant of 0 is DENY_ALL.
#ifndef TOLLGATE_SRC_SERVER_RLQS_ASSIGN_H_
#define TOLLGATE_SRC_SERVER_RLQS_ASSIGN_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"

namespace tollgate::server {

using RlqsBucketAction = envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse::BucketAction;

struct RlqsShareInput {
  double demand_per_second = 0;
  int64_t outstanding = 0;
  bool refresh = false;
};

// The fresh grant of each subscription (0 for those not refreshed), by the rule above.
// REQUIRES: demands >= 0, outstanding >= 0.
std::vector<int64_t> SplitGrant(int64_t grant, absl::Span<const RlqsShareInput> subscriptions);

// What one assignment tells Envoy.
struct RlqsAssignment {
  enum class Strategy { kAllowAll, kDenyAll, kTokenBucket };
  Strategy strategy = Strategy::kAllowAll;
  int64_t tokens = 0;  // kTokenBucket: max_tokens (>= 1)
  // kTokenBucket: tokens_per_fill is 1 (false) or 2 (true).
  bool parity = false;
  int64_t ttl_seconds = 1;  // whole seconds (Envoy reads no more), >= 1
};

// The assignment of a grant of `tokens` (0: DENY_ALL), with `ttl_seconds`.
RlqsAssignment GrantAssignment(int64_t tokens, bool parity, int64_t ttl_seconds);

// The time to live, in whole seconds, of an assignment to a bucket Envoy reports every
// `reporting_interval_micros`, from a server that decides every `round_micros`: a little over
// two reporting intervals (2 intervals plus a round, rounded up), so one late or lost report
// does not expire it, and a server that went away lets Envoy fall back soon after.
int64_t AssignmentTtlSeconds(int64_t reporting_interval_micros, int64_t round_micros);

// Writes `assignment` as the action for the bucket whose BucketId is `bucket_id` (serialized).
void WriteAssignment(const RlqsAssignment& assignment, const std::string& bucket_id,
                     RlqsBucketAction* out);
// The AbandonAction for `bucket_id` (serialized).
void WriteAbandon(const std::string& bucket_id, RlqsBucketAction* out);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLQS_ASSIGN_H_
