// Copyright tollgate authors. The metered endpoints of the HTTP API that do not take
// /v1/check's body: POST /v1/settle (docs/http.md). Adapters over the check service's
// Limiter, as HttpHandler::HandleCheck is.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/metered_ids.h"
#include "src/server/check_json.h"
#include "src/server/http_handler.h"
#include "src/server/json_errors.h"
#include "src/server/metered_json.h"
#include "src/server/ratelimit_headers.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;

// 200 with `decision`'s JSON and the limit's RateLimit fields.
HttpResponse DecisionResponse(const Limit& limit, const Decision& decision,
                              RateLimitHeaderFormat format, unsigned version, bool keep_alive) {
  HttpResponse response =
      JsonResponse(http::status::ok, DecisionJson(limit.name, decision), version, keep_alive);
  const Limit* limits[] = {&limit};
  RateLimitFields fields =
      RateLimitHeaderFields(format, limits, absl::MakeConstSpan(&decision, 1), 0);
  if (!fields.policy.empty()) response.set("RateLimit-Policy", fields.policy);
  if (!fields.rate_limit.empty()) response.set("RateLimit", fields.rate_limit);
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

}  // namespace tollgate::server
