// Copyright tollgate authors. How a tollgate instance divides what it may admit of one
// (limit, key) among the Envoy buckets (subscriptions) that count against it, and what it
// sends each of them. Pure: no I/O, no clock, no locks.
//
// Each round tells this instance what it may still admit of one (limit, key) (`available`):
// from Redis' sync script, its grant (its share of what is left, weighted by its demand
// against the other instances'), less what it charged since; without Redis, the limit less
// what its Envoys were granted or admitted in the window; with Redis away, its fallback share
// likewise. Each subscription j (one Envoy's bucket) has
//   demand_j   requests per second Envoy asked of it (allowed + denied) in its last report,
//   refresh_j  whether it may get a new assignment now. A new grant replaces the bucket Envoy
//              holds, so it goes only to a bucket whose reports show its grant spent (a
//              replacement would waste the rest), that holds DENY_ALL, or whose grant was for
//              a fixed window that is over; the others keep spending theirs.
// SplitGrant gives each refreshed subscription
//   fresh_j = min(floor(available * w_j / sum(w)), what is left of available)
//   w_j     = max(10 n * demand_j, D)   (D = sum of demands, n subscriptions; every w_j = 1
//             when D = 0): the rule of src/algorithm/share.h's DemandWeights, so a quiet bucket
//             keeps 1/(10 n) and the others share in proportion to what they ask.
// A grant is charged to the limit's counter when it is sent (ledger.h): Envoy's reports
// of what it admitted are covered by it, and only what they show beyond it is counted. So
// what every instance's Envoys may admit is always counted or within some instance's grant,
// and the fleet stays within the limit as in sync mode (docs/sync.md), less what is granted
// and never spent (the rest of a grant that expires, or that a fixed window's end takes
// away). What can pass is what an Envoy admits with no assignment (its
// no_assignment_behavior) or after one expired (its expired_assignment_behavior), and the
// rest of a fixed window's grant admitted between the window's end and the replacement's
// arrival.
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

namespace tollgate::rlqs {

using RlqsBucketAction = envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse::BucketAction;

struct RlqsShareInput {
  double demand_per_second = 0;
  bool refresh = false;
};

// The fresh grant of each subscription (0 for those not refreshed), by the rule above.
// REQUIRES: demands >= 0.
std::vector<int64_t> SplitGrant(int64_t available, absl::Span<const RlqsShareInput> subscriptions);

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

}  // namespace tollgate::rlqs

#endif  // TOLLGATE_SRC_SERVER_RLQS_ASSIGN_H_
