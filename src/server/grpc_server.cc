// Copyright tollgate authors.
#include "src/server/grpc_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "boost/asio/post.hpp"
#include "src/core/absl_view.h"
#include "src/server/grpc_tls_handshake.h"
#include "src/server/h2_session.h"

namespace tollgate::server {

namespace net = boost::asio;

// ---- GrpcResponder --------------------------------------------------------------------------

GrpcResponder& GrpcResponder::operator=(GrpcResponder&& other) noexcept {
  if (this != &other) {
    if (call_ != nullptr)
      std::move(*this).Finish(absl::InternalError("the handler dropped the call"));
    call_ = std::move(other.call_);
  }
  return *this;
}

GrpcResponder::~GrpcResponder() {
  if (call_ != nullptr)
    std::move(*this).Finish(absl::InternalError("the handler dropped the call"));
}

void GrpcResponder::Finish(std::string response) && {
  if (call_ == nullptr) return;
  std::shared_ptr<Call> call = std::move(call_);
  GrpcOutcome outcome;
  outcome.ok = true;
  outcome.message = std::move(response);
  call->Deliver(std::move(outcome));
}

void GrpcResponder::Finish(const absl::Status& status) && {
  if (call_ == nullptr) return;
  std::shared_ptr<Call> call = std::move(call_);
  GrpcOutcome outcome;
  outcome.ok = status.ok();
  if (!status.ok()) outcome.status = status;
  call->Deliver(std::move(outcome));
}

int64_t GrpcResponder::deadline_micros() const {
  return call_ == nullptr ? kNoGrpcDeadline : call_->deadline_micros;
}

std::string_view GrpcResponder::traceparent() const {
  return call_ == nullptr ? std::string_view() : std::string_view(call_->traceparent);
}

// ---- GrpcMethods ----------------------------------------------------------------------------

void GrpcMethods::AddUnary(std::string path, GrpcUnaryHandler handler) {
  streaming_.erase(path);
  handlers_.insert_or_assign(std::move(path), std::move(handler));
}

void GrpcMethods::AddStreaming(std::string path, GrpcStreamFactory factory) {
  handlers_.erase(path);
  streaming_.insert_or_assign(std::move(path), std::move(factory));
}

const GrpcStreamFactory* GrpcMethods::FindStreaming(std::string_view path) const {
  auto it = streaming_.find(AbslView(path));
  return it == streaming_.end() ? nullptr : &it->second;
}

const GrpcUnaryHandler* GrpcMethods::Find(std::string_view path) const {
  auto it = handlers_.find(AbslView(path));
  return it == handlers_.end() ? nullptr : &it->second;
}

// ---- GrpcServer -----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(EventLoops& loops,
                                                              GrpcServerOptions options,
                                                              GrpcMethods methods) {
  if (options.max_message_bytes == 0 || options.max_concurrent_streams == 0 ||
      options.max_header_list_bytes == 0 || options.reset_burst == 0 || options.max_settings == 0 ||
      options.control_burst == 0 || options.max_buffered_bytes_per_connection == 0 ||
      options.max_buffered_bytes == 0 || options.idle_timeout.count() <= 0 ||
      options.max_streaming_calls_per_connection == 0 || options.max_stream_queued_bytes == 0 ||
      (options.keepalive_interval.count() > 0 && options.keepalive_timeout.count() <= 0) ||
      (options.tls != nullptr &&
       (options.max_tls_handshakes == 0 || options.tls_handshake_timeout.count() <= 0))) {
    return absl::InvalidArgumentError("gRPC server: a limit that must be positive is 0");
  }
  const ListenAddress address = options.address;
  if (options.timers == nullptr) options.timers = LoopTimers({});
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->shared_ = std::make_shared<GrpcServerShared>(std::move(options), std::move(methods));
  absl::StatusOr<std::shared_ptr<Listener>> listener =
      Listener::Start(loops, address, [shared = server->shared_](net::ip::tcp::socket socket) {
        if (shared->options.tls != nullptr) {
          StartGrpcTlsHandshake(shared, std::move(socket));
          return;
        }
        auto session = std::make_shared<H2Session>(
            shared, ::tollgate::net::ConnectionStream(std::move(socket)));
        session->Start();
      });
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

uint16_t GrpcServer::port() const { return listener_->port(); }

std::string GrpcServer::address() const { return listener_->address(); }

bool GrpcServer::shutting_down() const {
  return shared_->shutting_down.load(std::memory_order_acquire);
}

int GrpcServer::connections() const {
  absl::MutexLock lock(&shared_->mu);
  return static_cast<int>(shared_->sessions.size());
}

namespace {

// Runs `action` on each open session's loop.
void ForEachSession(GrpcServerShared& shared, void (H2Session::*action)()) {
  std::vector<std::shared_ptr<H2Session>> sessions;
  {
    absl::MutexLock lock(&shared.mu);
    for (const auto& [pointer, weak] : shared.sessions) {
      if (std::shared_ptr<H2Session> session = weak.lock()) sessions.push_back(std::move(session));
    }
  }
  for (std::shared_ptr<H2Session>& session : sessions) {
    net::io_context& loop = session->loop();
    net::post(loop, [session = std::move(session), action] { ((*session).*action)(); });
  }
}

bool AwaitNoSessions(GrpcServerShared& shared, std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&shared.mu);
  return shared.mu.AwaitWithTimeout(
      absl::Condition(
          +[](absl::flat_hash_map<H2Session*, std::weak_ptr<H2Session>>* sessions) {
            return sessions->empty();
          },
          &shared.sessions),
      absl::FromChrono(timeout));
}

}  // namespace

bool GrpcServer::Shutdown(std::chrono::milliseconds drain_timeout) {
  if (shared_ == nullptr) return true;
  if (!shared_->shutting_down.exchange(true, std::memory_order_acq_rel)) {
    if (listener_ != nullptr) listener_->Stop();
  }
  ForEachSession(*shared_, &H2Session::GoAway);
  if (AwaitNoSessions(*shared_, drain_timeout)) return true;
  ForEachSession(*shared_, &H2Session::Close);
  // Close runs on each loop at once; a loop that is not running any more leaves its
  // sessions to be destroyed with it.
  AwaitNoSessions(*shared_, std::chrono::seconds(2));
  return false;
}

}  // namespace tollgate::server
