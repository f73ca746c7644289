// Copyright tollgate authors. The HTTP/JSON service: a Beast server around an HttpHandler.
//
//   auto server = HttpServer::Start({.host = "127.0.0.1", .port = 0, .loops = &loops},
//                                   check_service);
//   spdlog::info("listening http={}", (*server)->address());
//   ... on SIGTERM:
//   (*server)->Shutdown();
//   (*server)->Wait(std::chrono::seconds(10));
#ifndef TOLLGATE_SRC_SERVER_HTTP_SERVER_H_
#define TOLLGATE_SRC_SERVER_HTTP_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/server/check_service.h"
#include "src/server/http_handler.h"
#include "src/server/http_session.h"
#include "tollgate/limiter.h"
#include "tollgate/timers.h"

namespace tollgate::server {

class EventLoops;
class Metrics;
class RlsService;

struct HttpServerOptions {
  // An IP literal or a name that resolves to one.
  std::string host = "127.0.0.1";
  // 0 binds an ephemeral port; port() says which.
  uint16_t port = 8080;
  // The loops the connections run on (shared with the gRPC server and the Redis clients).
  // nullptr: the server starts loops of its own, `threads` of them (0: one per hardware
  // thread). REQUIRES: outlives the server.
  EventLoops* loops = nullptr;
  int threads = 0;
  // The connections' monotonic time (deadlines, idle timeouts): only NowMicros() is used, so
  // it never runs anything on the loops. nullptr: a monotonic clock of the server's own
  // (LoopTimers over no loops, tollgate/timers.h).
  std::shared_ptr<Timers> timers;
  HttpSessionLimits limits;
  // Bound on the items of one POST /v1/check {"checks": [...]}; more is a 400. Envoy's
  // descriptors on POST /json are bounded by RlsServiceOptions::max_descriptors.
  size_t max_checks_per_request = 64;
  // When set, POST /json answers Envoy's JSON shape through it. REQUIRES: outlives the server.
  RlsService* rls_service = nullptr;
  // The RateLimit fields of /v1/check (HttpHandler::set_ratelimit_headers).
  RateLimitHeaderFormat ratelimit_headers = RateLimitHeaderFormat::kDraft11;
  // When set, each check is counted and GET /metrics renders it. REQUIRES: outlives the
  // server.
  Metrics* metrics = nullptr;
  // Answers GET /readyz; empty means always ready.
  ReadinessCheck readiness;
  // Answers GET /healthcheck (HttpHandler::set_health_check); empty means always healthy.
  ReadinessCheck health_check;
  // Serve only GET of this path, with `metrics` (HttpHandler::set_metrics_only); empty:
  // every route.
  std::string metrics_only_path;
  // Said by a ready GET /readyz when it returns text (HttpHandler::set_readiness_note).
  ReadinessNote readiness_note;
};

// Serves the HTTP API (src/server/http_handler.h) on one address, HTTP/1.1 keep-alive. Each
// connection lives on one event loop (src/server/event_loops.h): its reads, its answer and
// its timers run on that loop's thread, with no strand and no hop between threads unless the
// store answers from another thread.
//
// Thread-safe: every method may be called from any thread.
class HttpServer {
 public:
  // Binds, listens and starts the I/O threads. Unavailable when the address cannot be
  // resolved or bound (in use, no permission), naming the address.
  // Checks go to `service`'s running snapshot (a reload of it reaches the next request).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           std::shared_ptr<CheckService> service);

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Shuts down and waits (up to 10 s for in-flight requests).
  // REQUIRES: the service's stores have answered every check the server made (stores answer
  // within their deadline, well inside the drain time).
  ~HttpServer();

  // The bound address, e.g. "127.0.0.1:39417" (the real port when options.port was 0).
  std::string address() const;
  uint16_t port() const { return port_; }

  // Stops accepting connections and closes idle ones; a request in flight is answered
  // (with "Connection: close") before its connection closes. Returns at once; idempotent.
  void Shutdown();

  // Waits until every connection has closed after Shutdown(), at most `drain_timeout`.
  // Returns true when all requests finished. Connections still open then are closed by
  // their loops' end (the server's own loops stop here; shared loops stop with their owner).
  // REQUIRES: Shutdown() was called; one caller at a time; not on a loop thread.
  bool Wait(std::chrono::milliseconds drain_timeout);

 private:
  struct State;
  HttpServer(std::unique_ptr<State> state, std::string host, uint16_t port);

  std::unique_ptr<State> state_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_SERVER_H_
