// Copyright tollgate authors.
#include "src/server/grpc_tls_handshake.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/steady_timer.hpp"
#include "spdlog/spdlog.h"
#include "src/net/connection_stream.h"
#include "src/server/grpc_tls.h"
#include "src/server/h2_session.h"

namespace tollgate::server {
namespace {

namespace net = boost::asio;

// warn at most once a second over the process, debug otherwise: a flood of bad handshakes
// must not flood the log. `now_micros`: the server's monotonic time.
spdlog::level::level_enum FailureLevel(int64_t now_micros) {
  static std::atomic<int64_t> next_warning_micros{0};
  int64_t next = next_warning_micros.load(std::memory_order_relaxed);
  const bool due =
      now_micros >= next && next_warning_micros.compare_exchange_strong(
                                next, now_micros + 1'000'000, std::memory_order_relaxed);
  return due ? spdlog::level::warn : spdlog::level::debug;
}

// "HOST:PORT" of `peer`, or "a client" when it is not known.
std::string Describe(const net::ip::tcp::endpoint& peer) {
  if (peer.port() == 0) return "a client";
  return absl::StrCat(peer.address().to_string(), ":", peer.port());
}

net::ip::tcp::endpoint PeerOf(const net::ip::tcp::socket& socket) {
  boost::system::error_code ignored;
  return socket.remote_endpoint(ignored);
}

// One connection's handshake: done once the handshake completes, fails or times out,
// whichever comes first; the connection then is an H2Session or closed. Its TLS state
// (OpenSSL's and the TLS stream's buffers, 45 to 50 KiB: docs/envoy.md) is made only once the
// client has sent something, so that a connection that sends nothing holds only its socket
// and timer.
class TlsHandshake : public std::enable_shared_from_this<TlsHandshake> {
 public:
  TlsHandshake(std::shared_ptr<GrpcServerShared> shared, net::ip::tcp::socket socket)
      : shared_(std::move(shared)),
        tls_(*shared_->options.tls),
        peer_(PeerOf(socket)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()) {}

  void Start() {
    timer_.expires_after(shared_->options.tls_handshake_timeout);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code error) {
      if (!error) self->OnTimeout();
    });
    socket_.async_wait(
        net::ip::tcp::socket::wait_read,
        [self = shared_from_this()](boost::system::error_code error) { self->OnReadable(error); });
  }

 private:
  void OnReadable(boost::system::error_code error) {
    if (done_) return;
    if (error) {
      OnHandshake(error);
      return;
    }
    stream_.emplace(std::move(socket_), tls_.context());
    stream_->AsyncHandshake(
        [self = shared_from_this()](boost::system::error_code error) { self->OnHandshake(error); });
  }

  void Finish() {
    done_ = true;
    tls_.counters().handshakes_in_progress.fetch_sub(1, std::memory_order_relaxed);
  }

  void Close() {
    if (stream_.has_value()) {
      stream_->Close();
      return;
    }
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  void OnTimeout() {
    if (done_) return;
    Finish();
    tls_.counters().handshakes_timed_out.fetch_add(1, std::memory_order_relaxed);
    if (const auto level = FailureLevel(shared_->timers->NowMicros()); spdlog::should_log(level)) {
      spdlog::log(level, "grpc tls: closed the connection of {}: no handshake within {} ms",
                  Describe(peer_), shared_->options.tls_handshake_timeout.count());
    }
    Close();  // the pending wait or handshake completes with an error, after done_
  }

  void OnHandshake(boost::system::error_code error) {
    if (done_) return;
    Finish();
    timer_.cancel();
    if (error) {
      tls_.counters().handshakes_failed.fetch_add(1, std::memory_order_relaxed);
      if (const auto level = FailureLevel(shared_->timers->NowMicros());
          spdlog::should_log(level)) {
        spdlog::log(level, "grpc tls: handshake with {} failed: {}", Describe(peer_),
                    Reason(error));
      }
      Close();
      return;
    }
    tls_.counters().handshakes_completed.fetch_add(1, std::memory_order_relaxed);
    if (shared_->shutting_down.load(std::memory_order_acquire)) {
      Close();
      return;
    }
    std::make_shared<H2Session>(shared_, *std::move(stream_))->Start();
  }

  std::string Reason(const boost::system::error_code& error) {
    if (!stream_.has_value()) return error.message();
    const long verify = SSL_get_verify_result(stream_->ssl());
    if (verify == X509_V_ERR_APPLICATION_VERIFICATION) {
      return absl::StrCat("the client certificate does not carry the SAN ",
                          tls_.files().client_san);
    }
    if (verify != X509_V_OK) {
      return absl::StrCat("the client certificate: ", X509_verify_cert_error_string(verify));
    }
    return error.message();
  }

  const std::shared_ptr<GrpcServerShared> shared_;
  GrpcTls& tls_;  // held by shared_'s options
  const net::ip::tcp::endpoint peer_;
  // Until the client sends its first bytes; then in stream_.
  net::ip::tcp::socket socket_;
  std::optional<::tollgate::net::ConnectionStream> stream_;
  net::steady_timer timer_;
  bool done_ = false;
};

}  // namespace

void StartGrpcTlsHandshake(std::shared_ptr<GrpcServerShared> shared, net::ip::tcp::socket socket) {
  GrpcTlsCounters& counters = shared->options.tls->counters();
  const int64_t before = counters.handshakes_in_progress.fetch_add(1, std::memory_order_relaxed);
  if (before >= static_cast<int64_t>(shared->options.max_tls_handshakes)) {
    counters.handshakes_in_progress.fetch_sub(1, std::memory_order_relaxed);
    counters.handshakes_refused.fetch_add(1, std::memory_order_relaxed);
    if (const auto level = FailureLevel(shared->timers->NowMicros()); spdlog::should_log(level)) {
      spdlog::log(level,
                  "grpc tls: refused the connection of {}: {} handshakes in progress "
                  "(--grpc-tls-max-handshakes)",
                  Describe(PeerOf(socket)), before);
    }
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  std::make_shared<TlsHandshake>(std::move(shared), std::move(socket))->Start();
}

}  // namespace tollgate::server
