// Copyright tollgate authors.
#include "src/server/http_server.h"

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "src/server/event_loops.h"
#include "src/server/listen_address.h"

namespace tollgate::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::State {
  explicit State(std::shared_ptr<CheckService> service)
      : context(std::make_shared<HttpSessionContext>()) {
    context->handler = std::make_shared<HttpHandler>(std::move(service));
  }

  // Shared with every session.
  const std::shared_ptr<HttpSessionContext> context;
  std::unique_ptr<EventLoops> own_loops;
  std::shared_ptr<Listener> listener;

  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, std::shared_ptr<CheckService> service) {
  if (service == nullptr) return absl::InvalidArgumentError("HttpServer needs a check service");
  if (options.max_checks_per_request < 1) {
    return absl::InvalidArgumentError("max_checks_per_request must be >= 1");
  }
  auto state = std::make_unique<State>(std::move(service));
  HttpHandler& handler = *state->context->handler;
  handler.set_rls_service(options.rls_service);
  handler.set_metrics(options.metrics);
  handler.set_readiness(std::move(options.readiness));
  handler.set_health_check(std::move(options.health_check));
  if (!options.metrics_only_path.empty()) {
    if (options.metrics == nullptr) {
      return absl::InvalidArgumentError("a metrics-only listener needs the metrics");
    }
    handler.set_metrics_only(std::move(options.metrics_only_path));
  }
  handler.set_readiness_note(std::move(options.readiness_note));
  handler.set_max_checks_per_request(options.max_checks_per_request);
  handler.set_ratelimit_headers(options.ratelimit_headers);
  state->context->limits = options.limits;

  EventLoops* loops = options.loops;
  if (loops == nullptr) {
    absl::StatusOr<std::unique_ptr<EventLoops>> own = EventLoops::Start(options.threads);
    if (!own.ok()) return own.status();
    state->own_loops = *std::move(own);
    loops = state->own_loops.get();
  }
  state->context->timers = options.timers != nullptr ? std::move(options.timers) : LoopTimers({});
  absl::StatusOr<std::shared_ptr<Listener>> listener = Listener::Start(
      *loops, ListenAddress{options.host, options.port},
      // Weak: a stopped server's context (and its check service) is not
      // kept alive by an accept still pending on a loop.
      [weak = std::weak_ptr<HttpSessionContext>(state->context)](tcp::socket socket) {
        std::shared_ptr<HttpSessionContext> context = weak.lock();
        if (context == nullptr) return;
        std::make_shared<HttpSession>(std::move(socket), std::move(context))->Start();
      });
  if (!listener.ok()) return listener.status();
  state->listener = *std::move(listener);
  const std::string host = state->listener->host();
  const uint16_t port = state->listener->port();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(state), host, port));
}

HttpServer::HttpServer(std::unique_ptr<State> state, std::string host, uint16_t port)
    : state_(std::move(state)), host_(std::move(host)), port_(port) {}

HttpServer::~HttpServer() {
  Shutdown();
  Wait(std::chrono::seconds(10));
}

std::string HttpServer::address() const { return state_->listener->address(); }

void HttpServer::Shutdown() {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->shut_down) return;
    state_->shut_down = true;
  }
  state_->listener->Stop();
  for (const std::weak_ptr<HttpSession>& weak : state_->context->registry.Close()) {
    if (std::shared_ptr<HttpSession> session = weak.lock()) session->CloseWhenIdle();
  }
}

bool HttpServer::Wait(std::chrono::milliseconds drain_timeout) {
  const bool drained = state_->context->registry.AwaitEmpty(absl::FromChrono(drain_timeout));
  if (state_->own_loops != nullptr) {
    state_->own_loops->Stop();
    state_->own_loops->Join();
  }
  return drained;
}

}  // namespace tollgate::server
