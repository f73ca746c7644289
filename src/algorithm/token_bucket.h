// Copyright tollgate authors. Token bucket as a pure function.
//
// The whole state is one number (as in folly's TokenBucket): `empty_at_micros`, the time
// at which the bucket would hold zero tokens. At time `now` the bucket holds
//   min(capacity, (now - empty_at) * refill_per_second / 1e6)
// tokens. A missing state is a full bucket. Checking `cost` tokens:
//   fill_time   = capacity * 1e6 / rate                 (an empty bucket refills in this)
//   empty_at    = max(state or -inf, now - fill_time)    (cap at full)
//   next        = empty_at + cost * 1e6 / rate
//   allowed     = next <= now
// and when allowed the new state is `next`. All arithmetic is IEEE double on integer
// microseconds, in exactly this order, so src/store/redis/lua/token_bucket.lua computes
// bit-identical decisions.
#ifndef TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_
#define TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_

#include <cstdint>
#include <optional>

#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct TokenBucketParams {
  // REQUIRES: capacity >= 1, refill_per_second > 0.
  int64_t capacity = 1;
  double refill_per_second = 1;
};

struct TokenBucketState {
  double empty_at_micros = 0;
  bool operator==(const TokenBucketState&) const = default;
};

// REQUIRES: cost >= 0. `state` is nullopt for a key never seen (or expired).
// A cost above capacity is refused with DenyReason::kCostExceedsLimit.
Outcome<TokenBucketState> TokenBucketCheck(const std::optional<TokenBucketState>& state,
                                           int64_t now_micros, const TokenBucketParams& params,
                                           int64_t cost);

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_
