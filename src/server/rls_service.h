// Copyright tollgate authors. Envoy's rate-limit service (RLS v3) on tollgate.
//
// `RlsService` answers `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from
// Envoy-style configs (src/config/envoy_config.h) through the process's CheckService
// (src/server/check_service.h): it plans the request (src/server/rls_plan.h, where the rules
// of an answer are), checks the counted descriptors in one store call, and renders the
// answer. src/server/rls_grpc.h serves it over gRPC (GrpcServer on the event loops) with
// gRPC's health service, so Envoy's `rate_limit_service` can point at tollgate.
//
// - One counted descriptor goes through Limiter::CheckAsync (answered inline by the memory
//   store); several through one Limiter::CheckAllAsync, all or nothing over the enforced
//   ones, shadow ones decided in the same call.
// - The store fails: the descriptors answer OK without a limit (fail open) and it is logged.
#ifndef TOLLGATE_SRC_SERVER_RLS_SERVICE_H_
#define TOLLGATE_SRC_SERVER_RLS_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "src/config/envoy_config.h"
#include "src/server/check_service.h"
#include "src/server/rls_plan.h"
#include "src/server/rls_span.h"
#include "src/server/tracing.h"
#include "tollgate/clock.h"
#include "tollgate/store.h"

namespace tollgate::server {

class Metrics;

struct RlsServiceOptions {
  // The service holding the running config (shared with HTTP). When set, `domains`,
  // `store`, `clock` and `max_override_limits` are ignored: the service's apply.
  // REQUIRES: outlives the RlsService.
  CheckService* check_service = nullptr;
  // Without `check_service`: the RlsService makes its own from these.
  // One config per domain; two with the same domain are an error.
  std::vector<EnvoyDomainConfig> domains;
  // Where counters live (shared with the HTTP service). nullptr: a fresh in-memory store.
  std::shared_ptr<Store> store;
  // Time for the in-memory store when `store` is nullptr. nullptr: SystemClock().
  // REQUIRES: outlives the service.
  Clock* clock = nullptr;
  // Global shadow mode: never answer OVER_LIMIT overall.
  bool shadow_mode = false;
  // Global quota mode: every descriptor in quota mode (rls_plan.h).
  bool quota_mode = false;
  // Answer with dynamic_metadata holding the request and the matched rules' `metadata`
  // (rls_plan.h), as envoyproxy/ratelimit with RESPONSE_DYNAMIC_METADATA.
  bool response_dynamic_metadata = false;
  // A descriptor's own hits_addend is a request, not a report (RlsPlanOptions).
  bool descriptor_hits_are_requests = false;
  // Add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to response_headers_to_add,
  // from the counted descriptor with the least remaining (as envoyproxy/ratelimit with
  // LIMIT_RESPONSE_HEADERS_ENABLED).
  bool response_headers = true;
  // Distinct (requests_per_unit, unit) overrides remembered; beyond it an override is
  // ignored (the configured rule applies) and logged.
  int max_override_limits = 1000;
  // Bound on the descriptors of one request; more is InvalidArgument (gRPC
  // INVALID_ARGUMENT, HTTP 400 on /json), checked before anything is matched or counted.
  // Envoy sends one descriptor per `rate_limits` action list of a route (a handful).
  int max_descriptors = 64;
  // When set, every counted descriptor's decision (allowed, refused, shadow_refused) and
  // each call's duration are recorded, and the rules' limits registered on each config
  // change. REQUIRES: outlives the service.
  Metrics* metrics = nullptr;
  // When set, each call whose RlsCallSource names its API gets a span if sampled
  // (src/server/rls_span.h says what it holds). REQUIRES: outlives the service.
  Tracer* tracer = nullptr;
};

using RlsCallback = absl::AnyInvocable<void(absl::StatusOr<RateLimitResponse>) &&>;

// Thread-safe.
class RlsService {
 public:
  // InvalidArgument for duplicate domains, limits the Limiter refuses, or
  // max_descriptors < 1.
  static absl::StatusOr<std::unique_ptr<RlsService>> Create(RlsServiceOptions options);

  RlsService(const RlsService&) = delete;
  RlsService& operator=(const RlsService&) = delete;
  ~RlsService();

  // Answers `request` (which need only live until this returns); `done` runs exactly once,
  // possibly before this returns or on a store thread. An error status is InvalidArgument (empty
  // domain or descriptors, more than `max_descriptors` descriptors, an entry with an empty key, a
  // descriptor too long to be a key); Envoy then applies its own failure_mode_deny.
  // `source`: where the call came from, for its span.
  void ShouldRateLimit(const RateLimitRequest& request, RlsCallback done,
                       const RlsCallSource& source = {});

  // Blocking form, for tests and the /json endpoint.
  absl::StatusOr<RateLimitResponse> ShouldRateLimitSync(const RateLimitRequest& request);

  // Replaces the Envoy domains (tollgate's own limits stay); counters of rules whose full
  // key is unchanged carry on. On error the old configuration stays.
  absl::Status UpdateDomains(std::vector<EnvoyDomainConfig> domains);

 private:
  struct Call;
  struct Reply;
  RlsService(RlsServiceOptions options, std::unique_ptr<CheckService> owned, CheckService* service);
  // Plans, checks and answers `request` into `reply`.
  void Answer(const RateLimitRequest& request, Reply reply);

  const RlsServiceOptions options_;
  const std::unique_ptr<CheckService> owned_;  // when no check_service was given
  CheckService* const service_;
};

// The answer to `POST /json` (envoyproxy/ratelimit's HTTP endpoint): the request body is a
// RateLimitRequest in proto3 JSON ({"domain": ..., "descriptors": [{"entries": [{"key": ...,
// "value": ...}]}]}), the reply body a RateLimitResponse in proto3 JSON ("overallCode",
// "statuses", ...). Status 200 when OK, 429 when OVER_LIMIT, 503 when refused because a
// fail_closed limit's store is unreachable, 400 with {"error": "..."} for a body that is not
// such JSON or a malformed request, 500 for anything else.
struct RlsJsonReply {
  int http_status = 200;
  std::string body;
  // Response header fields to add (name, value): X-RateLimit-Limit, -Remaining and -Reset
  // as Envoy's rate-limit filter adds them with DRAFT_VERSION_03 (XRateLimitHeaderFields in
  // src/server/ratelimit_headers.h), when asked for and some status carries a limit.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Answers `json_body` through `service` (a call of RlsCallSource::Api::kJson), with the
// X-RateLimit-* fields when `x_ratelimit_headers`; `done` runs exactly once, possibly before this
// returns or on a store thread.
void HandleRlsJson(RlsService& service, std::string_view json_body, bool x_ratelimit_headers,
                   absl::AnyInvocable<void(RlsJsonReply) &&> done);

// The X-RateLimit-* fields Envoy's DRAFT_VERSION_03 option derives from `response` (its
// statuses that carry a current_limit), as (name, value); empty when none does.
std::vector<std::pair<std::string, std::string>> XRateLimitHeaders(
    const RateLimitResponse& response);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_SERVICE_H_
