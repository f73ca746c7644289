// Copyright tollgate authors. The answer to a planned ShouldRateLimit (src/server/rls_plan.h,
// where the rules of an answer are): its statuses, overall code, dynamic metadata and
// RateLimit-* headers as Envoy's RateLimitResponse, and what it says in sum for a trace span.
// Pure functions of the plan and the time; tests drive them through rls_plan_test.cc.
#ifndef TOLLGATE_SRC_SERVER_RLS_RENDER_H_
#define TOLLGATE_SRC_SERVER_RLS_RENDER_H_

#include <cstdint>
#include <string_view>

#include "src/server/rls_plan.h"

namespace tollgate::server {

// Writes the answer to `plan` (decisions set) into `*response`: statuses, overall code,
// dynamic metadata and, when `headers`, RateLimit-Limit/-Remaining/-Reset from the counted
// descriptor with the least remaining. `now_micros` gives block-list rules their reset time.
// A rule's `metadata` is parsed from its JSON here, only when plan.dynamic_metadata is set.
// REQUIRES: `*response` empty.
void RenderRateLimitResponse(const RlsPlan& plan, int64_t now_micros, bool headers,
                             RateLimitResponse* response);

// What the answer to `plan` (decisions set) says in sum, for its trace span: the overall code
// and how many statuses are OVER_LIMIT (as RenderRateLimitResponse would write them).
struct RlsOutcome {
  RateLimitResponse::Code overall_code = RateLimitResponse::OK;
  int over_limit_descriptors = 0;
};
RlsOutcome DecideOutcome(const RlsPlan& plan, int64_t now_micros);

// The dynamic_metadata of a response refused because the store is unreachable.
inline constexpr std::string_view kReasonMetadataKey = "reason";
inline constexpr std::string_view kLimitMetadataKey = "limit";
inline constexpr std::string_view kStoreUnavailableReason = "store_unavailable";

// Whether `response` is a refusal because the store is unreachable (POST /json: 503).
bool RefusedForStoreUnavailable(const RateLimitResponse& response);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_RENDER_H_
