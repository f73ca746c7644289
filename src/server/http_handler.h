// Copyright tollgate authors. The HTTP API, independent of sockets: request in, response out.
//
//   POST /v1/check   check one limit, or several all or nothing (src/server/check_json.h),
//                    with the RateLimit fields of src/server/ratelimit_headers.h
//   POST /v1/charge  the same body: consumption that happened, applied in full (never 429)
//   POST /v1/settle  settle a reservation ("reserve": true on /v1/check) at its actual cost
//   POST /v1/acquire, /v1/release, /v1/renew  a concurrency limit's leases
//   POST /json       Envoy's JSON shape (src/server/rls_service.h), when an RlsService is set
//   GET  /healthz    {"status":"ok"}: the process is up
//   GET  /readyz     200 {"status":"ready"}, or 503 {"status":"not_ready","reason":...}
//   GET  /metrics    Prometheus text (src/server/metrics.h), when metrics are set
// Anything else is a JSON error: 404 for an unknown path, 405 for a wrong method.
#ifndef TOLLGATE_SRC_SERVER_HTTP_HANDLER_H_
#define TOLLGATE_SRC_SERVER_HTTP_HANDLER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "boost/beast/http.hpp"
#include "src/server/check_service.h"
#include "src/server/ratelimit_headers.h"
#include "tollgate/limiter.h"

namespace tollgate::server {

class Metrics;
class RlsService;

// Whether the service can answer checks as configured: OK, or Unavailable with the reason.
using ReadinessCheck = std::function<absl::Status()>;
// What a ready service wants said about how it answers (such as "no config from xDS yet:
// answering OK with no limits"), or "" for nothing.
using ReadinessNote = std::function<std::string()>;

// A request and a response of the API: Beast's. A response's Content-Length is set when it
// is written (HttpSession), so a handler need not call prepare_payload().
using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using HttpResponseCallback = absl::AnyInvocable<void(HttpResponse) &&>;

// A complete response with a JSON body {"error": message}.
HttpResponse JsonErrorResponse(boost::beast::http::status status, absl::string_view message,
                               unsigned version, bool keep_alive);

// A complete response with `body` (JSON) and a final newline; Content-Type application/json,
// Cache-Control no-store.
HttpResponse JsonResponse(boost::beast::http::status status, std::string body, unsigned version,
                          bool keep_alive);

// The status for a limiter error: 400 when it is about the client's input (InvalidArgument,
// NotFound, OutOfRange), 503 when the store could not answer, 500 otherwise.
boost::beast::http::status StatusForError(const absl::Status& status);

// Routes requests; checks go to `service`'s running snapshot (parse, check, render), so a
// reload of the service reaches the next request. Thread-safe: Handle may be called
// concurrently.
class HttpHandler {
 public:
  // REQUIRES: non-null.
  explicit HttpHandler(std::shared_ptr<CheckService> service);
  // Serves Envoy's JSON shape on POST /json through `service` (the gRPC service's logic).
  // nullptr (the default) answers /json with 404. REQUIRES: outlives the handler.
  void set_rls_service(RlsService* service) { rls_service_ = service; }
  // Counts each decision and check duration, and serves GET /metrics. nullptr (the default)
  // answers /metrics with 404. REQUIRES: outlives the handler.
  void set_metrics(Metrics* metrics) { metrics_ = metrics; }
  // Answers GET /readyz; empty (the default) means always ready.
  void set_readiness(ReadinessCheck readiness) { readiness_ = std::move(readiness); }
  // Answers GET /healthcheck as envoyproxy/ratelimit does (Envoy Gateway's probes): 200 with
  // the body "OK", or 500 with the reason. Empty (the default) means always healthy.
  void set_health_check(ReadinessCheck health) { health_ = std::move(health); }
  // Serve only GET `path`, with the metrics (a listener of its own for Prometheus); every
  // other path is 404. Empty (the default): every route. REQUIRES: set_metrics.
  void set_metrics_only(std::string path) { metrics_only_path_ = std::move(path); }
  // When it returns text, a ready GET /readyz says it: {"status":"ready","note":"..."}.
  void set_readiness_note(ReadinessNote note) { readiness_note_ = std::move(note); }
  // Which RateLimit fields POST /v1/check sends (src/server/ratelimit_headers.h); kNone also
  // drops POST /json's X-RateLimit-* fields. Default kDraft11.
  void set_ratelimit_headers(RateLimitHeaderFormat format) { header_format_ = format; }
  // Bound on the items of one {"checks": [...]}; more is a 400. REQUIRES: >= 1.
  void set_max_checks_per_request(size_t max_checks) { max_checks_ = max_checks; }
  // The set_* methods REQUIRE that no request is being handled yet.

  HttpHandler(const HttpHandler&) = delete;
  HttpHandler& operator=(const HttpHandler&) = delete;

  // Answers `request` by calling `done` exactly once with a complete response (version and
  // keep-alive set), either before returning or later on a store thread.
  // `request` need only live until Handle returns. Never throws.
  void Handle(const HttpRequest& request, HttpResponseCallback done);

 private:
  // POST /v1/check, and the endpoints answered as it is: /v1/charge (its body), /v1/acquire
  // (one concurrency item).
  enum class CheckEndpoint { kCheck, kCharge, kAcquire };
  void HandleCheck(const HttpRequest& request, HttpResponseCallback done, CheckEndpoint endpoint);
  // POST /v1/settle, and /v1/release or /v1/renew (src/server/http_metered.cc).
  void HandleSettle(const HttpRequest& request, HttpResponseCallback done);
  void HandleLease(const HttpRequest& request, HttpResponseCallback done, bool renew);
  // GET /metrics (or the metrics-only path), /healthcheck.
  HttpResponse MetricsResponse(const HttpRequest& request) const;
  HttpResponse HealthCheckResponse(const HttpRequest& request) const;

  // Its snapshot is read once per request: a reload swaps it without a lock.
  const std::shared_ptr<CheckService> service_;
  RlsService* rls_service_ = nullptr;
  Metrics* metrics_ = nullptr;
  ReadinessCheck readiness_;
  ReadinessCheck health_;
  std::string metrics_only_path_;
  ReadinessNote readiness_note_;
  size_t max_checks_ = 64;
  RateLimitHeaderFormat header_format_ = RateLimitHeaderFormat::kDraft11;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_HANDLER_H_
