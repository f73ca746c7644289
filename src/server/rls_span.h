// Copyright tollgate authors. The trace span of one ShouldRateLimit call (RlsService, when it
// has a Tracer): one SERVER span per call, named as envoyproxy/ratelimit's gRPC instrumentation
// (otelgrpc) names it, so that dashboards built on either match.
//
// What a span holds:
// - gRPC: name "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", rpc.system
//   "grpc", rpc.service, rpc.method, rpc.grpc.status_code; parent: the call's traceparent.
// - POST /json: name "POST /json", http.request.method, url.path; no parent (as
//   envoyproxy/ratelimit's /json, whose spans start traces).
// - domain (the attribute name envoyproxy/ratelimit uses), ratelimit.descriptor_keys (one
//   string per descriptor: its entries' keys joined by ','; values are never recorded, as
//   they may be user ids or addresses), and once answered ratelimit.overall_code ("OK",
//   "OVER_LIMIT") and ratelimit.over_limit_descriptors.
// - status ERROR with the error for a call answered with an error, and for a call whose store
//   failed (answered OK, fail open).
#ifndef TOLLGATE_SRC_SERVER_RLS_SPAN_H_
#define TOLLGATE_SRC_SERVER_RLS_SPAN_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "src/server/rls_plan.h"
#include "src/server/tracing.h"

namespace tollgate::server {

inline constexpr char kShouldRateLimitSpanName[] =
    "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
inline constexpr char kJsonSpanName[] = "POST /json";

// Where a call came from, for its span.
struct RlsCallSource {
  enum class Api {
    kUntraced,  // no span (tests, internal callers)
    kGrpc,
    kJson,
  };
  Api api = Api::kUntraced;
  // The request's W3C traceparent header; "" when it had none.
  std::string_view traceparent;
};

// A call's span, or nothing (no tracer, untraced, or not sampled: then every method does
// nothing). Move-only; ended by the first of Answered or Failed (later calls do nothing).
// Not thread-safe: it travels with its call.
class RlsSpan {
 public:
  RlsSpan() = default;
  // Starts the span of `request` (read now: it need not outlive this) when `tracer` is set
  // and samples the call. REQUIRES: `tracer` outlives the span.
  RlsSpan(Tracer* tracer, const RlsCallSource& source, const RateLimitRequest& request);
  RlsSpan(RlsSpan&&) noexcept = default;
  RlsSpan& operator=(RlsSpan&&) noexcept = default;
  RlsSpan(const RlsSpan&) = delete;
  RlsSpan& operator=(const RlsSpan&) = delete;
  ~RlsSpan() = default;

  bool recording() const { return span_ != nullptr; }
  // The store failed; the call is answered OK (fail open) all the same.
  void StoreFailed(const absl::Status& error);
  // Ends the span with the answer to `plan` (decisions set).
  void Answered(const RlsPlan& plan, int64_t now_micros);
  // Ends the span of a call answered with `error`.
  void Failed(const absl::Status& error);

 private:
  Tracer* tracer_ = nullptr;
  bool grpc_ = false;
  std::unique_ptr<SpanRecord> span_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_SPAN_H_
