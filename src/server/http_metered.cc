// Copyright tollgate authors. The metered endpoints of the HTTP API that do not take
// /v1/check's body: POST /v1/settle, /v1/release and /v1/renew (docs/http.md). Adapters over the
// check service's Limiter, as HttpHandler::HandleCheck is.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/metered_ids.h"
#include "src/server/check_json.h"
#include "src/server/http_handler.h"
#include "src/server/json_errors.h"
#include "src/server/metered_json.h"
#include "src/server/metrics.h"
#include "src/server/ratelimit_headers.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;

// Sets `limit`'s RateLimit fields for `decision` on `response`.
void SetRateLimitFields(const Limit& limit, const Decision& decision, RateLimitHeaderFormat format,
                        HttpResponse& response) {
  const Limit* limits[] = {&limit};
  RateLimitFields fields =
      RateLimitHeaderFields(format, limits, absl::MakeConstSpan(&decision, 1), 0);
  if (!fields.policy.empty()) response.set("RateLimit-Policy", fields.policy);
  if (!fields.rate_limit.empty()) response.set("RateLimit", fields.rate_limit);
}

// 200 with `decision`'s JSON and the limit's RateLimit fields.
HttpResponse DecisionResponse(const Limit& limit, const Decision& decision,
                              RateLimitHeaderFormat format, unsigned version, bool keep_alive) {
  HttpResponse response =
      JsonResponse(http::status::ok, DecisionJson(limit.name, decision), version, keep_alive);
  SetRateLimitFields(limit, decision, format, response);
  return response;
}

constexpr char kUnknownReservation[] =
    "reservation: unknown (never made here, or forgotten after its limit's reservation_ttl)";

}  // namespace

void HttpHandler::HandleSettle(const HttpRequest& request, HttpResponseCallback done) {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  std::shared_ptr<const CheckSnapshot> snapshot = service_->snapshot();
  absl::StatusOr<SettleBody> body = ParseSettleBody(request.body());
  if (!body.ok()) {
    return std::move(done)(
        JsonErrorResponse(http::status::bad_request, body.status().message(), version, keep_alive));
  }
  std::optional<tollgate::internal::ReservationParts> parts =
      tollgate::internal::ParseReservationToken(body->reservation);
  if (!parts.has_value()) {
    return std::move(done)(JsonErrorResponse(
        http::status::bad_request, "reservation: not a reservation token", version, keep_alive));
  }
  // Only a limit of this config's `limits:` takes reservations (not an Envoy rule's).
  const Limit* limit = snapshot->FindHttpLimit(parts->limit);
  if (limit == nullptr) {
    return std::move(done)(
        JsonErrorResponse(http::status::not_found, kUnknownReservation, version, keep_alive));
  }
  Limiter& limiter = *snapshot->limiter;
  limiter.SettleAsync(
      body->reservation, body->cost,
      [snapshot = std::move(snapshot), limit, format = header_format_, version, keep_alive,
       done = std::move(done)](absl::StatusOr<Decision> decision) mutable {
        if (!decision.ok()) {
          return std::move(done)(JsonErrorResponse(
              StatusForError(decision.status()), decision.status().message(), version, keep_alive));
        }
        if (decision->reason == DenyReason::kNotFound) {
          return std::move(done)(
              JsonErrorResponse(http::status::not_found, kUnknownReservation, version, keep_alive));
        }
        if (decision->reason == DenyReason::kAlreadySettled) {
          return std::move(done)(JsonErrorResponse(http::status::conflict,
                                                   "reservation: settled already; nothing changed",
                                                   version, keep_alive));
        }
        std::move(done)(DecisionResponse(*limit, *decision, format, version, keep_alive));
      });
}

void HttpHandler::HandleLease(const HttpRequest& request, HttpResponseCallback done, bool renew) {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  std::shared_ptr<const CheckSnapshot> snapshot = service_->snapshot();
  absl::StatusOr<LeaseBody> body = ParseLeaseBody(request.body());
  if (!body.ok()) {
    return std::move(done)(
        JsonErrorResponse(http::status::bad_request, body.status().message(), version, keep_alive));
  }
  const Limit* limit = snapshot->FindHttpLimit(body->limit);
  if (limit == nullptr || limit->numbers.algorithm != Algorithm::kConcurrency) {
    return std::move(done)(
        JsonErrorResponse(http::status::bad_request,
                          absl::StrCat("limit: ", limit == nullptr ? "unknown limit " : "",
                                       QuoteForMessage(body->limit),
                                       limit == nullptr ? "" : " is not a concurrency limit"),
                          version, keep_alive));
  }
  auto answer = [snapshot, limit, lease = body->lease, renew, metrics = metrics_,
                 format = header_format_, version, keep_alive,
                 done = std::move(done)](absl::StatusOr<Decision> decision) mutable {
    if (!decision.ok()) {
      return std::move(done)(JsonErrorResponse(StatusForError(decision.status()),
                                               decision.status().message(), version, keep_alive));
    }
    const bool held = decision->allowed;
    if (renew && !held) {
      return std::move(done)(
          JsonErrorResponse(http::status::not_found,
                            "lease: not held (expired, released, or never granted); acquire again",
                            version, keep_alive));
    }
    DecisionExtras extras;
    Decision shown = *decision;
    if (renew) {
      extras.lease = lease;
      extras.expires_in_ms = CeilMillis(limit->numbers.window_micros);
      if (metrics != nullptr) metrics->LeaseHeld(limit->name, lease, limit->numbers.window_micros);
    } else {
      // A release is answered, held or not (it is idempotent); `released` says which.
      extras.released = held;
      shown.allowed = true;
      shown.reason = DenyReason::kNone;
      if (metrics != nullptr) metrics->LeaseGone(lease);
    }
    HttpResponse response = JsonResponse(http::status::ok, DecisionJson(limit->name, shown, extras),
                                         version, keep_alive);
    SetRateLimitFields(*limit, shown, format, response);
    std::move(done)(std::move(response));
  };
  Limiter& limiter = *snapshot->limiter;
  if (renew) {
    limiter.RenewAsync(*limit, body->key, body->lease, std::move(answer));
  } else {
    limiter.ReleaseAsync(*limit, body->key, body->lease, std::move(answer));
  }
}

}  // namespace tollgate::server
