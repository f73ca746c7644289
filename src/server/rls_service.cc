// Copyright tollgate authors.
#include "src/server/rls_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "src/server/descriptor_matcher.h"
#include "src/server/json_errors.h"
#include "src/server/metrics.h"
#include "src/server/ratelimit_headers.h"
#include "src/server/rls_render.h"
#include "tollgate/limiter.h"

namespace tollgate::server {

// Where an answer goes, and the call's span.
struct RlsService::Reply {
  RlsCallback done;
  RlsSpan span;

  void Fail(absl::Status status) && {
    span.Failed(status);
    std::move(done)(std::move(status));
  }

  void Answer(const RlsPlan& plan, int64_t now_micros, bool headers) && {
    span.Answered(plan, now_micros);
    RateLimitResponse response;
    RenderRateLimitResponse(plan, now_micros, headers, &response);
    std::move(done)(std::move(response));
  }
};

// One request whose counted descriptors are being checked: what the store's answer goes to.
struct RlsService::Call {
  // Holds the limiter, the matcher and the limits the plan points into.
  std::shared_ptr<const CheckSnapshot> snapshot;
  RlsPlan plan;
  Clock* clock = nullptr;
  Metrics* metrics = nullptr;
  bool headers = true;
  int64_t start_micros = 0;  // when metrics are set
  Reply reply;

  // Takes the store's decisions (one per plan.counted, or the store's error), renders the
  // answer and calls `done`.
  void Finish(absl::StatusOr<absl::Span<const Decision>> decisions) {
    // A blocked request only looked at its descriptors: nothing to record.
    const bool record = metrics != nullptr && !plan.blocked;
    if (!decisions.ok() || decisions->size() != plan.counted.size()) {
      const absl::Status error =
          decisions.ok() ? absl::InternalError("wrong number of decisions") : decisions.status();
      if (record) {
        for (size_t i : plan.counted) metrics->RecordCheckError(plan.descriptors[i].limit->name);
        if (metrics->ratelimit_families()) metrics->RecordRatelimitCallError();
      }
      // Fail open for now; the resilience issue adds per-rule policies.
      reply.span.StoreFailed(error);
      spdlog::warn("rls: store failed, answering OK for {} descriptor(s): {}", plan.counted.size(),
                   std::string(error.message()));
    } else {
      for (size_t j = 0; j < plan.counted.size(); ++j) {
        PlannedDescriptor& item = plan.descriptors[plan.counted[j]];
        item.decision = (*decisions)[j];
        if (record) {
          const bool shadow = item.rule_shadow || plan.global_shadow;
          metrics->RecordDecision(item.limit->name, *item.decision, shadow);
          if (metrics->ratelimit_families()) {
            metrics->RecordRatelimitHits(item.limit->name, item.cost, *item.decision, shadow);
          }
        }
      }
    }
    if (metrics != nullptr) {
      metrics->ObserveCheckDuration(CheckApi::kEnvoy, metrics->NowMicros() - start_micros);
    }
    std::move(reply).Answer(plan, clock->NowMicros(), headers);
  }
};

RlsService::RlsService(RlsServiceOptions options, std::unique_ptr<CheckService> owned,
                       CheckService* service)
    : options_(std::move(options)), owned_(std::move(owned)), service_(service) {}

RlsService::~RlsService() = default;

absl::StatusOr<std::unique_ptr<RlsService>> RlsService::Create(RlsServiceOptions options) {
  if (options.max_descriptors < 1) {
    return absl::InvalidArgumentError("max_descriptors must be >= 1");
  }
  std::unique_ptr<CheckService> owned;
  CheckService* service = options.check_service;
  if (service == nullptr) {
    LoadedConfigs config;
    config.envoy_domains = std::move(options.domains);
    LimiterFactory new_limiter;
    if (options.store != nullptr) {
      new_limiter = [store = options.store, clock = options.clock](std::vector<Limit> limits) {
        return Limiter::Create({.limits = std::move(limits), .store = store, .clock = clock});
      };
    }
    absl::StatusOr<std::unique_ptr<CheckService>> made =
        CheckService::Create({.new_limiter = std::move(new_limiter),
                              .clock = options.clock,
                              .metrics = options.metrics,
                              .max_override_limits = options.max_override_limits},
                             std::move(config));
    if (!made.ok()) return made.status();
    owned = *std::move(made);
    service = owned.get();
  }
  options.domains.clear();
  return std::unique_ptr<RlsService>(new RlsService(std::move(options), std::move(owned), service));
}

absl::Status RlsService::UpdateDomains(std::vector<EnvoyDomainConfig> domains) {
  return service_->ReloadDomains(std::move(domains));
}

void RlsService::ShouldRateLimit(const RateLimitRequest& request, RlsCallback done,
                                 const RlsCallSource& source) {
  Reply reply;
  reply.done = std::move(done);
  reply.span = RlsSpan(options_.tracer, source, request);
  Answer(request, std::move(reply));
}

void RlsService::Answer(const RateLimitRequest& request, Reply reply) {
  Metrics* const metrics = options_.metrics;
  const int64_t start_micros = metrics != nullptr ? metrics->NowMicros() : 0;
  std::shared_ptr<const CheckSnapshot> snapshot = service_->snapshot();
  absl::StatusOr<RlsPlan> plan =
      PlanRateLimit(request, *snapshot->matcher, *snapshot->limiter, &service_->overrides(),
                    {.global_shadow = options_.shadow_mode,
                     .global_quota = options_.quota_mode,
                     .dynamic_metadata = options_.response_dynamic_metadata,
                     .descriptor_hits_are_reports = !options_.descriptor_hits_are_requests,
                     .max_descriptors = options_.max_descriptors});
  if (!plan.ok()) {
    std::move(reply).Fail(plan.status());
    return;
  }
  if (plan->counted.empty()) {
    if (metrics != nullptr) {
      metrics->ObserveCheckDuration(CheckApi::kEnvoy, metrics->NowMicros() - start_micros);
    }
    std::move(reply).Answer(*plan, service_->clock().NowMicros(), options_.response_headers);
    return;
  }
  auto call = std::make_unique<Call>();
  call->snapshot = snapshot;  // `snapshot` stays held here: the answer may come inline
  call->plan = *std::move(plan);
  call->clock = &service_->clock();
  call->metrics = metrics;
  call->headers = options_.response_headers;
  call->start_micros = start_micros;
  call->reply = std::move(reply);
  Limiter& limiter = *snapshot->limiter;
  if (call->plan.counted.size() == 1 && !call->plan.descriptors[call->plan.counted[0]].report) {
    // One counted descriptor: the single-item path (inline for the memory store).
    // The item stays where it is: `call` moves into the callback, which lives until
    // CheckAsync is done with the key (Limiter::CheckAsync reads it before answering).
    const PlannedDescriptor& item = call->plan.descriptors[call->plan.counted[0]];
    const Limit& limit = *item.limit;
    const std::string_view key = item.key;
    const int64_t cost = item.cost;
    limiter.CheckAsync(limit, key, cost,
                       [call = std::move(call)](absl::StatusOr<Decision> decision) mutable {
                         if (!decision.ok()) {
                           call->Finish(decision.status());
                           return;
                         }
                         call->Finish(absl::Span<const Decision>(&*decision, 1));
                       });
    return;
  }
  std::vector<CheckRequest> requests = TakeCheckRequests(call->plan);
  limiter.CheckAllAsync(std::move(requests),
                        [call = std::move(call)](absl::StatusOr<MultiDecision> result) mutable {
                          if (!result.ok()) {
                            call->Finish(result.status());
                            return;
                          }
                          call->Finish(absl::Span<const Decision>(result->decisions));
                        });
}

absl::StatusOr<RateLimitResponse> RlsService::ShouldRateLimitSync(const RateLimitRequest& request) {
  absl::Notification answered;
  absl::StatusOr<RateLimitResponse> result;
  ShouldRateLimit(request, [&](absl::StatusOr<RateLimitResponse> response) {
    result = std::move(response);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

namespace {

// The length of a wire unit in seconds, as Envoy's rate-limit filter counts it (a month is
// 30 days, a year 365); 0 for UNKNOWN.
int64_t WireUnitSeconds(RateLimitResponse::RateLimit::Unit unit) {
  switch (unit) {
    case RateLimitResponse::RateLimit::SECOND:
      return 1;
    case RateLimitResponse::RateLimit::MINUTE:
      return 60;
    case RateLimitResponse::RateLimit::HOUR:
      return 3600;
    case RateLimitResponse::RateLimit::DAY:
      return 86400;
    case RateLimitResponse::RateLimit::WEEK:
      return 7 * 86400;
    case RateLimitResponse::RateLimit::MONTH:
      return 30 * 86400;
    case RateLimitResponse::RateLimit::YEAR:
      return 365 * 86400;
    default:
      return 0;
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> XRateLimitHeaders(
    const RateLimitResponse& response) {
  std::vector<DescriptorLimitStatus> statuses;
  for (const auto& status : response.statuses()) {
    if (!status.has_current_limit()) continue;
    statuses.push_back({.requests_per_unit = status.current_limit().requests_per_unit(),
                        .unit_seconds = WireUnitSeconds(status.current_limit().unit()),
                        .name = status.current_limit().name(),
                        .limit_remaining = status.limit_remaining(),
                        .reset_seconds = status.duration_until_reset().seconds()});
  }
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<XRateLimitFields> fields = XRateLimitHeaderFields(statuses);
  if (!fields.has_value()) return headers;
  headers.emplace_back("X-RateLimit-Limit", std::move(fields->limit));
  headers.emplace_back("X-RateLimit-Remaining", std::move(fields->remaining));
  headers.emplace_back("X-RateLimit-Reset", std::move(fields->reset));
  return headers;
}

void HandleRlsJson(RlsService& service, std::string_view json_body, bool x_ratelimit_headers,
                   absl::AnyInvocable<void(RlsJsonReply) &&> done) {
  auto error_reply = [](int http_status, std::string_view message) {
    // Built by protobuf's JSON printer, so the message is escaped correctly.
    google::protobuf::Struct error;
    (*error.mutable_fields())["error"].set_string_value(std::string(message));
    RlsJsonReply reply{http_status, "", {}};
    if (!google::protobuf::util::MessageToJsonString(error, &reply.body).ok()) {
      reply.body = R"({"error":"invalid request"})";
    }
    return reply;
  };
  RateLimitRequest request;
  google::protobuf::util::JsonParseOptions parse_options;
  parse_options.ignore_unknown_fields = false;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(std::string(json_body), &request, parse_options);
  if (!parsed.ok()) {
    std::move(done)(
        error_reply(400, RlsJsonParseErrorMessage(json_body, std::string(parsed.message()))));
    return;
  }
  auto answer = [done = std::move(done), error_reply,
                 x_ratelimit_headers](absl::StatusOr<RateLimitResponse> response) mutable {
    if (!response.ok()) {
      const absl::string_view message = response.status().message();
      std::move(done)(
          error_reply(response.status().code() == absl::StatusCode::kInvalidArgument ? 400 : 500,
                      std::string_view(message.data(), message.size())));
      return;
    }
    RlsJsonReply reply;
    reply.http_status = RefusedForStoreUnavailable(*response)                       ? 503
                        : response->overall_code() == RateLimitResponse::OVER_LIMIT ? 429
                                                                                    : 200;
    if (!google::protobuf::util::MessageToJsonString(*response, &reply.body).ok()) {
      std::move(done)(error_reply(500, "cannot print the response"));
      return;
    }
    if (x_ratelimit_headers) reply.headers = XRateLimitHeaders(*response);
    std::move(done)(std::move(reply));
  };
  service.ShouldRateLimit(request, std::move(answer),
                          {.api = RlsCallSource::Api::kJson, .traceparent = {}});
}

}  // namespace tollgate::server
