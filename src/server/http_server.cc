// Copyright tollgate authors.
#include "src/server/http_server.h"

#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "spdlog/spdlog.h"
#include "src/server/listen_address.h"

namespace tollgate::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Accepts connections and starts a session, on its own strand, for each.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, HttpSessionContext& context)
      : io_(io), context_(context), acceptor_(net::make_strand(io)), retry_timer_(io) {}

  absl::Status Listen(const tcp::endpoint& endpoint) {
    boost::system::error_code error;
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.set_option(net::socket_base::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(net::socket_base::max_listen_connections, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", FormatListenAddress(endpoint.address().to_string(), endpoint.port()),
          ": ", error.message()));
    }
    return absl::OkStatus();
  }

  uint16_t port() const { return acceptor_.local_endpoint().port(); }

  void Accept() {
    acceptor_.async_accept(
        net::make_strand(io_),
        [self = shared_from_this()](boost::system::error_code error, tcp::socket socket) {
          self->OnAccept(error, std::move(socket));
        });
  }

  void Stop() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor_.close(ignored);
      self->retry_timer_.cancel();
    });
  }

 private:
  void OnAccept(boost::system::error_code error, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (error) {
      // Out of file descriptors and the like: back off instead of spinning.
      spdlog::warn("accept failed: {}", error.message());
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([self = shared_from_this()](boost::system::error_code wait_error) {
        if (!wait_error && self->acceptor_.is_open()) self->Accept();
      });
      return;
    }
    std::make_shared<HttpSession>(std::move(socket), context_)->Start();
    Accept();
  }

  net::io_context& io_;
  HttpSessionContext& context_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
};

}  // namespace

// Members are destroyed in reverse order: the sessions, owned by handlers in `io`, go before
// the context they point to.
struct HttpServer::State {
  explicit State(std::shared_ptr<CheckService> service) : handler(std::move(service)) {}

  HttpHandler handler;
  HttpSessionContext context;
  net::io_context io;
  std::shared_ptr<Listener> listener;
  std::vector<std::thread> threads;

  absl::Mutex mu;
  int running_threads ABSL_GUARDED_BY(mu) = 0;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, std::shared_ptr<CheckService> service) {
  if (service == nullptr) return absl::InvalidArgumentError("HttpServer needs a check service");
  auto state = std::make_unique<State>(std::move(service));
  state->context.handler = &state->handler;
  state->handler.set_rls_service(options.rls_service);
  state->handler.set_metrics(options.metrics);
  state->handler.set_readiness(std::move(options.readiness));
  state->context.limits = options.limits;
  if (options.max_checks_per_request < 1) {
    return absl::InvalidArgumentError("max_checks_per_request must be >= 1");
  }
  state->handler.set_max_checks_per_request(options.max_checks_per_request);

  boost::system::error_code error;
  tcp::resolver resolver(state->io);
  auto endpoints = resolver.resolve(options.host, std::to_string(options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", FormatListenAddress(options.host, options.port),
                     ": cannot resolve host: ", error ? error.message() : "no address"));
  }
  tcp::endpoint endpoint = endpoints.begin()->endpoint();

  state->listener = std::make_shared<Listener>(state->io, state->context);
  if (absl::Status status = state->listener->Listen(endpoint); !status.ok()) return status;
  uint16_t port = state->listener->port();
  state->listener->Accept();

  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  {
    absl::MutexLock lock(&state->mu);
    state->running_threads = threads;
  }
  State* raw = state.get();
  for (int i = 0; i < threads; ++i) {
    state->threads.emplace_back([raw] {
      for (;;) {
        try {
          raw->io.run();
          break;
        } catch (const std::exception& e) {
          // A handler must not throw; if one does, log it and keep serving.
          spdlog::error("http: uncaught exception: {}", e.what());
        }
      }
      absl::MutexLock lock(&raw->mu);
      --raw->running_threads;
    });
  }
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::move(state), endpoint.address().to_string(), port));
}

HttpServer::HttpServer(std::unique_ptr<State> state, std::string host, uint16_t port)
    : state_(std::move(state)), host_(std::move(host)), port_(port) {}

HttpServer::~HttpServer() {
  Shutdown();
  Wait(std::chrono::seconds(10));
}

std::string HttpServer::address() const { return FormatListenAddress(host_, port_); }

void HttpServer::Shutdown() {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->shut_down) return;
    state_->shut_down = true;
  }
  state_->listener->Stop();
  for (const std::weak_ptr<HttpSession>& weak : state_->context.registry.Close()) {
    if (std::shared_ptr<HttpSession> session = weak.lock()) session->CloseWhenIdle();
  }
}

bool HttpServer::Wait(std::chrono::milliseconds drain_timeout) {
  bool drained = false;
  {
    absl::MutexLock lock(&state_->mu);
    auto all_stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->running_threads == 0;
    };
    drained =
        state_->mu.AwaitWithTimeout(absl::Condition(&all_stopped), absl::FromChrono(drain_timeout));
  }
  if (!drained) state_->io.stop();
  for (std::thread& thread : state_->threads) {
    if (thread.joinable()) thread.join();
  }
  state_->threads.clear();
  return drained;
}

}  // namespace tollgate::server
