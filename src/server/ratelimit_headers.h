// Copyright tollgate authors. The RateLimit header fields of a decision.
//
// POST /v1/check sends, by default, the fields of draft-ietf-httpapi-ratelimit-headers-11
// (Lists of Structured Fields items, RFC 9651), the limit's name as the policy name and one
// item per limit of the request:
//   RateLimit-Policy: "api";q=10;w=2      quota 10 per window of 2 seconds
//   RateLimit: "api";r=9;t=1              9 left, the window resets in 1 second
//   Retry-After: 3                        only when refused and a retry can help
// `--ratelimit-headers=draft07` keeps draft-07's form instead (`RateLimit-Policy: 10;w=2`,
// `RateLimit: limit=10, remaining=9, reset=1`, for the limit that speaks for the request),
// and `none` sends neither (Retry-After stays: it is plain HTTP).
// POST /json (Envoy's JSON shape) sends the X-RateLimit-Limit/-Remaining/-Reset fields that
// Envoy's rate-limit filter adds with `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
// All second values are rounded up, so a client that waits them is never early.
#ifndef TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_
#define TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate::server {

// Which RateLimit fields POST /v1/check sends (`tollgate serve --ratelimit-headers`).
enum class RateLimitHeaderFormat {
  kDraft11,  // "name";q=..;w=.. and "name";r=..;t=.., one item per limit (the default)
  kDraft07,  // 10;w=2 and limit=10, remaining=9, reset=1
  kNone,     // no RateLimit fields (nor X-RateLimit-* on POST /json)
};

// "draft11" (also "draft-11"), "draft07" (also "draft-07") or "none"; nullopt otherwise.
std::optional<RateLimitHeaderFormat> ParseRateLimitHeaderFormat(std::string_view text);
// "draft11", "draft07" or "none".
std::string_view RateLimitHeaderFormatName(RateLimitHeaderFormat format);

// ceil(micros / 1000) and ceil(micros / 1e6); negative inputs give 0.
int64_t CeilMillis(int64_t micros);
int64_t CeilSeconds(int64_t micros);

// `text` as a Structured Fields String (RFC 9651, 3.3.3): in double quotes, '"' and '\'
// escaped with '\'. A String holds only printable ASCII: any other byte becomes '?'.
std::string StructuredFieldString(std::string_view text);

// The numbers that made `decision` for `limit`: the limit's own, or its `local` numbers when
// the store failed and the limit falls back to a strict local limiter.
const LimitNumbers& DecidingNumbers(const Limit& limit, const Decision& decision);

// A policy's quota and window in seconds. For a token bucket the quota is the capacity and
// the window is the time an empty bucket takes to refill (capacity / refill rate, rounded
// up); for the windows it is the limit and the window length (rounded up). At least 1.
int64_t PolicyWindowSeconds(const LimitNumbers& numbers);

// draft-07's RateLimit-Policy item: "QUOTA;w=SECONDS" ("QUOTA" for a concurrency limit, whose
// quota is not per window).
std::string PolicyItem(const LimitNumbers& numbers);

// draft-07's RateLimit field: "limit=L, remaining=R, reset=S", reset in seconds rounded up.
std::string RateLimitField(const Decision& decision);

// draft-11's Quota Policy Item: "NAME";q=QUOTA;w=SECONDS; for a concurrency limit
// "NAME";q=LIMIT;qu="concurrent-requests" (the draft's quota unit of requests in flight).
std::string PolicyListItem(std::string_view name, const LimitNumbers& numbers);

// draft-11's Service Limit Item: "NAME";r=REMAINING;t=SECONDS (remaining at least 0, t the
// reset rounded up).
std::string ServiceLimitItem(std::string_view name, const Decision& decision);

// The values of RateLimit-Policy and RateLimit for one checked request; both empty for
// kNone.
struct RateLimitFields {
  std::string policy;
  std::string rate_limit;
};

// The fields for the items of one request: `limits[i]` decided `decisions[i]`, `top` the
// item that speaks for the request (src/server/check_json.h, MostRestrictive). kDraft11: one
// policy and one service-limit item per distinct limit (for a limit checked under several
// keys, its item with the least remaining), `top`'s first, then in request order.
// kDraft07: the policies of the distinct limits (`top`'s first) and `top`'s RateLimit.
// REQUIRES: limits.size() == decisions.size(), top < limits.size(), no null limit.
RateLimitFields RateLimitHeaderFields(RateLimitHeaderFormat format,
                                      absl::Span<const Limit* const> limits,
                                      absl::Span<const Decision> decisions, size_t top);

// Retry-After in seconds (rounded up, at least 1) when `decision` refused and says when a
// retry could pass; nullopt when allowed, or when retrying can never help
// (kCostExceedsLimit, retry_after_micros == 0).
std::optional<int64_t> RetryAfterSeconds(const Decision& decision);

// One descriptor status of an Envoy answer that carries a current limit.
struct DescriptorLimitStatus {
  uint32_t requests_per_unit = 0;
  // The length of the limit's unit in seconds (SECOND 1 ... YEAR 365 days).
  int64_t unit_seconds = 0;
  std::string_view name;  // the rule's `name`, may be empty
  uint32_t limit_remaining = 0;
  int64_t reset_seconds = 0;  // duration_until_reset
};

// Envoy's DRAFT_VERSION_03 fields (its XRateLimitHeaderUtils): the status with the least
// remaining (the first of equals) gives X-RateLimit-Remaining and -Reset, and
// X-RateLimit-Limit is its requests_per_unit followed by one `, RPU;w=UNIT_SECONDS` item per
// status, with `;name="NAME"` when named.
struct XRateLimitFields {
  std::string limit;
  std::string remaining;
  std::string reset;
};
// nullopt when `statuses` is empty (Envoy then adds none).
std::optional<XRateLimitFields> XRateLimitHeaderFields(
    absl::Span<const DescriptorLimitStatus> statuses);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RATELIMIT_HEADERS_H_
