// Copyright tollgate authors.
#include "src/server/http_handler.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/core/absl_view.h"
#include "src/server/check_json.h"
#include "src/server/http_framing.h"
#include "src/server/json_errors.h"
#include "src/server/metered_json.h"
#include "src/server/metrics.h"
#include "src/server/ratelimit_headers.h"
#include "src/server/rls_service.h"

namespace tollgate::server {

namespace http = boost::beast::http;

HttpResponse JsonResponse(http::status status, std::string body, unsigned version,
                          bool keep_alive) {
  HttpResponse response(status, version);
  response.set(http::field::server, "tollgate");
  response.set(http::field::content_type, "application/json");
  response.set(http::field::cache_control, "no-store");
  response.keep_alive(keep_alive);
  response.body() = std::move(body);
  response.body().push_back('\n');
  return response;
}

http::status StatusForError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return http::status::bad_request;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return http::status::service_unavailable;
    default:
      return http::status::internal_server_error;
  }
}

namespace {

// The reply status follows the item that speaks for the request.
http::status StatusForDecision(bool allowed, const Decision& top) {
  if (allowed) return http::status::ok;
  if (top.reason == DenyReason::kStoreUnavailable) return http::status::service_unavailable;
  return http::status::too_many_requests;
}

}  // namespace

HttpResponse JsonErrorResponse(http::status status, absl::string_view message, unsigned version,
                               bool keep_alive) {
  return JsonResponse(status, ErrorBody(message), version, keep_alive);
}

HttpHandler::HttpHandler(std::shared_ptr<CheckService> service) : service_(std::move(service)) {}

void HttpHandler::Handle(const HttpRequest& request, HttpResponseCallback done) {
  if (std::optional<FramingRefusal> refusal = CheckRequestFraming(request)) {
    return std::move(done)(JsonErrorResponse(refusal->status, refusal->message, request.version(),
                                             /*keep_alive=*/false));
  }
  absl::string_view target(request.target().data(), request.target().size());
  absl::string_view path = target.substr(0, target.find('?'));
  auto method_not_allowed = [&](const char* allow) {
    HttpResponse response = JsonErrorResponse(
        http::status::method_not_allowed,
        absl::StrCat(
            "method ",
            absl::string_view(request.method_string().data(), request.method_string().size()),
            " not allowed on ", path, " (use ", allow, ")"),
        request.version(), request.keep_alive());
    response.set(http::field::allow, allow);
    std::move(done)(std::move(response));
  };

  if (!metrics_only_path_.empty()) {
    if (path != metrics_only_path_) {
      return std::move(done)(
          JsonErrorResponse(http::status::not_found,
                            absl::StrCat("no such path: ", QuoteForMessage(path),
                                         " (this listener serves GET ", metrics_only_path_, ")"),
                            request.version(), request.keep_alive()));
    }
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return std::move(done)(MetricsResponse(request));
  }
  if (path == "/v1/check") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return HandleCheck(request, std::move(done), CheckEndpoint::kCheck);
  }
  if (path == "/v1/charge") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return HandleCheck(request, std::move(done), CheckEndpoint::kCharge);
  }
  if (path == "/v1/settle") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return HandleSettle(request, std::move(done));
  }
  if (path == "/v1/acquire") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return HandleCheck(request, std::move(done), CheckEndpoint::kAcquire);
  }
  if (path == "/v1/release" || path == "/v1/renew") {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    return HandleLease(request, std::move(done), path == "/v1/renew");
  }
  if (path == "/healthz") {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return std::move(done)(JsonResponse(http::status::ok, R"({"status":"ok"})", request.version(),
                                        request.keep_alive()));
  }
  if (path == "/json" && rls_service_ != nullptr) {
    if (request.method() != http::verb::post) return method_not_allowed("POST");
    const unsigned version = request.version();
    const bool keep_alive = request.keep_alive();
    return HandleRlsJson(
        *rls_service_, std::string_view(request.body().data(), request.body().size()),
        header_format_ != RateLimitHeaderFormat::kNone,
        [done = std::move(done), version, keep_alive](RlsJsonReply reply) mutable {
          HttpResponse response = JsonResponse(static_cast<http::status>(reply.http_status),
                                               std::move(reply.body), version, keep_alive);
          for (const auto& [name, value] : reply.headers) response.set(name, value);
          std::move(done)(std::move(response));
        });
  }
  if (path == "/readyz") {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    absl::Status ready = readiness_ ? readiness_() : absl::OkStatus();
    if (ready.ok()) {
      const std::string note = readiness_note_ ? readiness_note_() : std::string();
      std::string body = note.empty()
                             ? std::string(R"({"status":"ready"})")
                             : DumpJson(nlohmann::json{{"status", "ready"}, {"note", note}});
      return std::move(done)(
          JsonResponse(http::status::ok, std::move(body), request.version(), request.keep_alive()));
    }
    nlohmann::json body = {{"status", "not_ready"}, {"reason", std::string(ready.message())}};
    return std::move(done)(JsonResponse(http::status::service_unavailable, DumpJson(body),
                                        request.version(), request.keep_alive()));
  }
  if (path == "/metrics" && metrics_ != nullptr) {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return std::move(done)(MetricsResponse(request));
  }
  if (path == "/healthcheck") {
    if (request.method() != http::verb::get) return method_not_allowed("GET");
    return std::move(done)(HealthCheckResponse(request));
  }
  std::move(done)(JsonErrorResponse(http::status::not_found,
                                    absl::StrCat("no such path: ", QuoteForMessage(path),
                                                 " (try POST /v1/check or GET /healthz)"),
                                    request.version(), request.keep_alive()));
}

HttpResponse HttpHandler::MetricsResponse(const HttpRequest& request) const {
  HttpResponse response(http::status::ok, request.version());
  response.set(http::field::server, "tollgate");
  response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  response.set(http::field::cache_control, "no-store");
  response.keep_alive(request.keep_alive());
  response.body() = metrics_->Render();
  return response;
}

HttpResponse HttpHandler::HealthCheckResponse(const HttpRequest& request) const {
  const absl::Status health = health_ ? health_() : absl::OkStatus();
  HttpResponse response(health.ok() ? http::status::ok : http::status::internal_server_error,
                        request.version());
  response.set(http::field::server, "tollgate");
  response.set(http::field::content_type, "text/plain; charset=utf-8");
  response.set(http::field::cache_control, "no-store");
  response.keep_alive(request.keep_alive());
  response.body() = health.ok() ? "OK" : absl::StrCat(health.message(), "\n");
  return response;
}

namespace {

// The reply to a checked request. REQUIRES: result.decisions.size() == body.requests.size()
// == limits.size() > 0.
HttpResponse CheckedResponse(const ParsedCheckBody& body, const MultiDecision& result,
                             absl::Span<const Limit* const> limits, RateLimitHeaderFormat format,
                             unsigned version, bool keep_alive) {
  size_t top = MostRestrictive(result.allowed, result.decisions);
  const Decision& top_decision = result.decisions[top];
  HttpResponse response = JsonResponse(StatusForDecision(result.allowed, top_decision),
                                       CheckReplyBody(body, result, limits), version, keep_alive);

  RateLimitFields fields = RateLimitHeaderFields(format, limits, result.decisions, top);
  if (!fields.policy.empty()) response.set("RateLimit-Policy", fields.policy);
  if (!fields.rate_limit.empty()) response.set("RateLimit", fields.rate_limit);
  if (!result.allowed) {
    std::optional<int64_t> retry = RetryAfterSeconds(top_decision);
    // A fail_closed refusal always says when to come back, even if the store could not tell.
    if (!retry && top_decision.reason == DenyReason::kStoreUnavailable) retry = 1;
    if (retry) response.set(http::field::retry_after, absl::StrCat(*retry));
  }
  return response;
}

// What the answer to one /v1/check needs once the store has decided.
struct PendingCheck {
  // Holds the limits `limits` points to.
  std::shared_ptr<const CheckSnapshot> snapshot;
  ParsedCheckBody body;
  std::vector<const Limit*> limits;
  unsigned version = 11;
  bool keep_alive = true;
  Metrics* metrics = nullptr;
  RateLimitHeaderFormat header_format = RateLimitHeaderFormat::kDraft11;
  int64_t start_micros = 0;
  bool charge = false;  // POST /v1/charge
  HttpResponseCallback done;

  void Answer(absl::StatusOr<MultiDecision> result) && {
    if (metrics != nullptr) {
      metrics->ObserveCheckDuration(CheckApi::kHttp, metrics->NowMicros() - start_micros);
      for (size_t i = 0; i < body.requests.size(); ++i) {
        if (result.ok() && i < result->decisions.size()) {
          if (charge) {
            metrics->RecordCharge(body.requests[i].limit, body.requests[i].cost,
                                  result->decisions[i]);
          } else {
            metrics->RecordDecision(body.requests[i].limit, result->decisions[i]);
          }
        } else {
          metrics->RecordCheckError(body.requests[i].limit);
        }
      }
    }
    if (!result.ok()) {
      return std::move(done)(JsonErrorResponse(StatusForError(result.status()),
                                               result.status().message(), version, keep_alive));
    }
    if (result->decisions.size() != body.requests.size()) {
      return std::move(done)(JsonErrorResponse(http::status::internal_server_error,
                                               "limiter returned a wrong number of decisions",
                                               version, keep_alive));
    }
    if (metrics != nullptr) {
      for (size_t i = 0; i < result->tokens.size(); ++i) {
        if (!result->tokens[i].empty() && limits[i]->numbers.algorithm == Algorithm::kConcurrency) {
          metrics->LeaseHeld(limits[i]->name, result->tokens[i], limits[i]->numbers.window_micros);
        }
      }
    }
    std::move(done)(CheckedResponse(body, *result, limits, header_format, version, keep_alive));
  }
};

}  // namespace

void HttpHandler::HandleCheck(const HttpRequest& request, HttpResponseCallback done,
                              CheckEndpoint endpoint) {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  const int64_t start_micros = metrics_ != nullptr ? metrics_->NowMicros() : 0;
  // This request's snapshot: a reload may swap it while the check is in flight.
  std::shared_ptr<const CheckSnapshot> snapshot = service_->snapshot();
  absl::StatusOr<ParsedCheckBody> parsed = endpoint == CheckEndpoint::kAcquire
                                               ? ParseAcquireBody(request.body())
                                               : ParseCheckBody(request.body(), max_checks_);
  if (!parsed.ok()) {
    return std::move(done)(JsonErrorResponse(http::status::bad_request, parsed.status().message(),
                                             version, keep_alive));
  }
  // Look the names up here so an unknown one gets a message naming the field, and so the
  // reply can describe each limit's policy.
  std::vector<const Limit*> limits;
  limits.reserve(parsed->requests.size());
  for (size_t i = 0; i < parsed->requests.size(); ++i) {
    const Limit* limit = snapshot->FindHttpLimit(parsed->requests[i].limit);
    if (limit == nullptr) {
      std::string field = parsed->batch ? absl::StrCat("checks[", i, "].limit") : "limit";
      return std::move(done)(JsonErrorResponse(
          http::status::bad_request,
          absl::StrCat(field, ": unknown limit ", QuoteForMessage(parsed->requests[i].limit)),
          version, keep_alive));
    }
    limits.push_back(limit);
    if (parsed->requests[i].reserve && endpoint != CheckEndpoint::kCheck) {
      std::string field = parsed->batch ? absl::StrCat("checks[", i, "].reserve") : "reserve";
      return std::move(done)(JsonErrorResponse(http::status::bad_request,
                                               absl::StrCat(field, ": only on POST /v1/check"),
                                               version, keep_alive));
    }
    if (endpoint == CheckEndpoint::kAcquire &&
        limit->numbers.algorithm != Algorithm::kConcurrency) {
      return std::move(done)(
          JsonErrorResponse(http::status::bad_request,
                            absl::StrCat("limit: ", QuoteForMessage(limit->name),
                                         " is not a concurrency limit (algorithm: concurrency)"),
                            version, keep_alive));
    }
  }

  Limiter& limiter = *snapshot->limiter;
  PendingCheck pending{.snapshot = std::move(snapshot),
                       .body = *std::move(parsed),
                       .limits = std::move(limits),
                       .version = version,
                       .keep_alive = keep_alive,
                       .metrics = metrics_,
                       .header_format = header_format_,
                       .start_micros = start_micros,
                       .charge = endpoint == CheckEndpoint::kCharge,
                       .done = std::move(done)};
  if (pending.body.requests.size() == 1 && endpoint == CheckEndpoint::kCheck &&
      !pending.body.requests[0].reserve &&
      pending.limits[0]->numbers.algorithm != Algorithm::kConcurrency) {
    // The single-item path: inline through the prepared limit for the memory store.
    const ParsedCheck& only = pending.body.requests[0];
    const Limit& limit = *pending.limits[0];
    // `only` lives in `pending`, which the callback owns until CheckAsync has returned.
    const std::string_view key = only.key;
    const int64_t cost = only.cost;
    limiter.CheckAsync(limit, key, cost,
                       [pending = std::move(pending)](absl::StatusOr<Decision> decision) mutable {
                         if (!decision.ok()) return std::move(pending).Answer(decision.status());
                         MultiDecision result;
                         result.allowed = decision->allowed;
                         result.decisions.push_back(*decision);
                         std::move(pending).Answer(std::move(result));
                       });
    return;
  }
  std::vector<CheckRequest> requests;
  requests.reserve(pending.body.requests.size());
  for (size_t i = 0; i < pending.body.requests.size(); ++i) {
    const ParsedCheck& check = pending.body.requests[i];
    CheckRequest& request = requests.emplace_back();
    request.limit = *pending.limits[i];
    request.key = check.key;
    request.cost = check.cost;
    if (pending.charge) request.op = ItemOp::kCharge;
    if (check.reserve) request.op = ItemOp::kReserve;
  }
  limiter.CheckAllAsync(std::move(requests), [pending = std::move(pending)](
                                                 absl::StatusOr<MultiDecision> result) mutable {
    std::move(pending).Answer(std::move(result));
  });
}

}  // namespace tollgate::server
