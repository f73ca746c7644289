// Copyright tollgate authors. The RateLimit header fields of a decision.
//
// We follow draft-ietf-httpapi-ratelimit-headers-07 (the version that introduced the
// combined `RateLimit` field):
//   RateLimit-Policy: 10;w=2            quota 10 per window of 2 seconds (a list, one per limit)
//   RateLimit: limit=10, remaining=9, reset=1
//   Retry-After: 3                      only when refused and a retry can help
// All second values are rounded up, so a client that waits them is never early.
#ifndef TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_
#define TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate::server {

// ceil(micros / 1000) and ceil(micros / 1e6); negative inputs give 0.
int64_t CeilMillis(int64_t micros);
int64_t CeilSeconds(int64_t micros);

// The numbers that made `decision` for `limit`: the limit's own, or its `local` numbers when
// the store failed and the limit falls back to a strict local limiter.
const LimitNumbers& DecidingNumbers(const Limit& limit, const Decision& decision);

// One RateLimit-Policy item: "QUOTA;w=SECONDS". For a token bucket the quota is the
// capacity and the window is the time an empty bucket takes to refill (capacity / refill
// rate, rounded up); for the windows it is the limit and the window length (rounded up,
// at least 1).
std::string PolicyItem(const LimitNumbers& numbers);

// The RateLimit field: "limit=L, remaining=R, reset=S", reset in seconds rounded up.
std::string RateLimitField(const Decision& decision);

// Retry-After in seconds (rounded up, at least 1) when `decision` refused and says when a
// retry could pass; nullopt when allowed, or when retrying can never help
// (kCostExceedsLimit, retry_after_micros == 0).
std::optional<int64_t> RetryAfterSeconds(const Decision& decision);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_
