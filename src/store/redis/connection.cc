// Copyright tollgate authors.
#include "src/store/redis/connection.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/net/handler_scope.h"
#include "src/store/redis/tls.h"

namespace tollgate::redis {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// "redis_version:7.0.15" out of an INFO server reply. Returns {major, minor} or {-1, -1}.
std::pair<int, int> ParseVersion(absl::string_view info, std::string* text) {
  for (absl::string_view line : absl::StrSplit(info, '\n')) {
    line = absl::StripSuffix(line, "\r");
    if (!absl::ConsumePrefix(&line, "redis_version:")) continue;
    *text = std::string(line);
    std::vector<absl::string_view> parts = absl::StrSplit(line, '.');
    int major = -1;
    int minor = -1;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[0], &major) &&
        absl::SimpleAtoi(parts[1], &minor)) {
      return {major, minor};
    }
  }
  return {-1, -1};
}

// The connection whose replies this thread is handing to their callbacks.
thread_local RedisConnection* t_reading = nullptr;

}  // namespace

RedisConnection::RedisConnection(asio::io_context& io, ConnectionOptions options)
    : io_(io),
      options_(std::move(options)),
      address_(absl::StrCat(options_.url.host, ":", options_.url.port)),
      resolver_(io),
      socket_(io),
      connect_timer_(io),
      reconnect_timer_(io),
      watchdog_timer_(io),
      backoff_(options_.reconnect_min) {}

RedisConnection::~RedisConnection() = default;

void RedisConnection::Start(absl::AnyInvocable<void(absl::Status) &&> first_result) {
  first_result_ = std::move(first_result);
  if (options_.tls_context == nullptr && options_.url.tls) {
    absl::StatusOr<std::shared_ptr<asio::ssl::context>> context =
        MakeTlsContext(options_.url.tls_options);
    if (!context.ok()) {
      // Bad TLS files: nothing to retry until the configuration changes.
      {
        absl::MutexLock lock(&mu_);
        state_ = State::kClosed;
      }
      asio::post(io_, [this, status = context.status()] { ReportFirst(status); });
      return;
    }
    options_.tls_context = *std::move(context);
  }
  asio::post(io_, [this] { Connect(); });
}

bool RedisConnection::ready() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kReady;
}

void RedisConnection::ReportFirst(absl::Status status) {
  if (first_result_) {
    auto report = std::move(first_result_);
    first_result_ = nullptr;
    std::move(report)(std::move(status));
  }
}

void RedisConnection::Connect() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kClosed) return;
    state_ = State::kConnecting;
  }
  const uint64_t generation = ++generation_;
  reader_ = std::make_unique<ReplyReader>();
  tls_ = nullptr;  // a TLS session never outlives its TCP connection
  write_buffer_.clear();
  writing_ = false;
  handshake_error_ = absl::OkStatus();

  connect_timer_.expires_after(options_.connect_timeout);
  connect_timer_.async_wait([this, generation](const boost::system::error_code& error) {
    if (error || generation != generation_) return;
    Fail(absl::UnavailableError(absl::StrCat("Redis at ", address_, ": no connection within ",
                                             options_.connect_timeout.count(), " ms")),
         true);
  });
  resolver_.async_resolve(
      options_.url.host, std::to_string(options_.url.port),
      [this, generation](const boost::system::error_code& error,
                         const tcp::resolver::results_type& results) {
        if (generation != generation_) return;
        if (error) {
          Fail(absl::UnavailableError(absl::StrCat("cannot resolve Redis host ", options_.url.host,
                                                   ": ", error.message())),
               true);
          return;
        }
        asio::async_connect(
            socket_, results,
            [this, generation](const boost::system::error_code& error, const tcp::endpoint&) {
              if (generation != generation_) return;
              if (error) {
                Fail(absl::UnavailableError(absl::StrCat("cannot connect to Redis at ", address_,
                                                         ": ", error.message())),
                     true);
                return;
              }
              if (options_.tls_context != nullptr) {
                StartTls();
              } else {
                OnConnected();
              }
            });
      });
}

void RedisConnection::StartTls() {
  namespace ssl = asio::ssl;
  tls_ = std::make_shared<ssl::stream<tcp::socket&>>(socket_, *options_.tls_context);
  const std::string& host = options_.url.host;
  boost::system::error_code not_an_address;
  asio::ip::make_address(host, not_an_address);
  // SNI carries names only, never addresses (RFC 6066).
  if (not_an_address) SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str());
  if (options_.url.tls_options.verify_host) {
    tls_->set_verify_callback(ssl::host_name_verification(host));
  }
  const uint64_t generation = generation_;
  auto tls = tls_;
  tls_->async_handshake(
      ssl::stream_base::client, [this, tls, generation](const boost::system::error_code& error) {
        if (generation != generation_) return;
        if (error) {
          Fail(absl::UnavailableError(absl::StrCat("TLS handshake with Redis at ", address_,
                                                   " failed: ", error.message())),
               true);
          return;
        }
        OnConnected();
      });
}

template <typename Handler>
void RedisConnection::AsyncReadSome(Handler handler) {
  if (tls_ == nullptr) {
    // A read that drains the socket makes the next one wait for the reactor's event rather
    // than ask the kernel first (src/net/stream_socket.h).
    socket_.ReadSome(asio::buffer(read_buffer_), std::move(handler));
    return;
  }
  auto tls = tls_;
  tls->async_read_some(
      asio::buffer(read_buffer_),
      [tls, handler = std::move(handler)](const boost::system::error_code& error,
                                          size_t bytes) mutable { handler(error, bytes); });
}

template <typename Handler>
void RedisConnection::AsyncWrite(Handler handler) {
  const asio::const_buffer rest = asio::buffer(write_buffer_) + write_offset_;
  if (tls_ == nullptr) {
    asio::async_write(socket_, rest, std::move(handler));
    return;
  }
  auto tls = tls_;
  asio::async_write(
      *tls, rest,
      [tls, handler = std::move(handler)](const boost::system::error_code& error,
                                          size_t bytes) mutable { handler(error, bytes); });
}

void RedisConnection::Write() {
  writing_ = true;
  write_offset_ = 0;
  if (tls_ == nullptr) {
    // Most batches fit the socket's buffer: written here, without a handler's round trip
    // through the loop.
    boost::system::error_code error;
    write_offset_ = socket_.WriteNow(asio::buffer(write_buffer_), error);
    if (error || write_offset_ == write_buffer_.size()) {
      // Commands queued meanwhile have a Flush of their own scheduled (flush_posted_).
      OnWritten(generation_, error, /*flush_again=*/false);
      return;
    }
  }
  const uint64_t generation = generation_;
  AsyncWrite([this, generation](const boost::system::error_code& error, size_t) {
    OnWritten(generation, error, /*flush_again=*/true);
  });
}

void RedisConnection::OnWritten(uint64_t generation, const boost::system::error_code& error,
                                bool flush_again) {
  if (generation != generation_) return;
  writing_ = false;
  write_buffer_.clear();
  write_offset_ = 0;
  if (error) {
    Fail(absl::UnavailableError(
             absl::StrCat("write to Redis at ", address_, " failed: ", error.message())),
         true);
    return;
  }
  // A Flush that ran while this write was out left its commands queued.
  if (flush_again) Flush();
}

void RedisConnection::OnConnected() {
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kHandshaking;
  }
  Read();
  Handshake();
}

void RedisConnection::Handshake() {
  const RedisUrl& url = options_.url;
  const uint64_t generation = generation_;
  auto check = [this, generation](std::string what) {
    return [this, generation, what = std::move(what)](absl::StatusOr<RedisReply> reply) {
      if (generation != generation_ || !handshake_error_.ok()) return;
      if (reply.ok() && reply->is_error()) {
        handshake_error_ = absl::PermissionDeniedError(
            absl::StrCat("Redis at ", address_, " refused ", what, ": ", reply->str));
      }
    };
  };
  if (!url.password.empty()) {
    if (url.user.empty()) {
      SendInternal(FormatCommand({"AUTH", url.password}), check("AUTH"));
    } else {
      SendInternal(FormatCommand({"AUTH", url.user, url.password}), check("AUTH"));
    }
  }
  if (url.db != 0) {
    SendInternal(FormatCommand({"SELECT", std::to_string(url.db)}),
                 check(absl::StrCat("SELECT ", url.db)));
  }
  SendInternal(
      FormatCommand({"INFO", "server"}), [this, generation](absl::StatusOr<RedisReply> reply) {
        if (generation != generation_) return;
        absl::Status status = handshake_error_;
        if (status.ok() && !reply.ok()) status = reply.status();
        if (status.ok() && reply->is_error()) {
          status = absl::PermissionDeniedError(
              absl::StrCat("Redis at ", address_, " refused INFO server: ", reply->str));
        }
        if (status.ok()) {
          std::string version = "unknown";
          auto [major, minor] = ParseVersion(reply->str, &version);
          if (major < 7) {
            status = absl::FailedPreconditionError(
                absl::StrCat("Redis ", version, " at ", address_,
                             " is too old: tollgate needs Redis 7.0 or later (for EXPIRE ... NX)"));
          }
        }
        if (!status.ok()) {
          if (status.code() == absl::StatusCode::kUnavailable) return;  // Fail() already ran
          ReportFirst(status);
          Fail(status, true);
          return;
        }
        connect_timer_.cancel();
        backoff_ = options_.reconnect_min;
        {
          absl::MutexLock lock(&mu_);
          state_ = State::kReady;
        }
        ReportFirst(absl::OkStatus());
      });
}

void RedisConnection::QueueLocked(std::string_view command, ReplyCallback done, bool* post_flush) {
  queued_bytes_.append(command.data(), command.size());
  queued_callbacks_.push_back(std::move(done));
  *post_flush = !flush_posted_;
  flush_posted_ = true;
}

RedisConnection* RedisConnection::ReadingOnThisThread() { return t_reading; }

bool RedisConnection::TrySend(std::string_view command, ReplyCallback& done) {
  bool post_flush = false;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kReady) return false;
    QueueLocked(command, std::move(done), &post_flush);
  }
  if (post_flush) ScheduleFlush();
  return true;
}

void RedisConnection::Send(std::string_view command, ReplyCallback done) {
  if (TrySend(command, done)) return;
  std::move(done)(absl::UnavailableError(absl::StrCat("not connected to Redis at ", address_)));
}

void RedisConnection::ScheduleFlush() {
  // Inside a handler on this loop (a read of replies, or of a client's requests), the
  // commands it queues leave in one write when it returns; elsewhere after the handlers
  // ready now.
  net::HandlerScope::Work flush = [this] { Flush(); };
  if (net::HandlerScope::Defer(io_, flush)) return;
  asio::post(io_, [flush = std::move(flush)]() mutable { std::move(flush)(); });
}

void RedisConnection::SendInternal(std::string_view command, ReplyCallback done) {
  bool post_flush = false;
  {
    absl::MutexLock lock(&mu_);
    QueueLocked(command, std::move(done), &post_flush);
  }
  if (post_flush) ScheduleFlush();
}

void RedisConnection::Flush() {
  {
    absl::MutexLock lock(&mu_);
    flush_posted_ = false;
    if (writing_) return;  // the write in progress flushes again when it completes
    if (state_ != State::kReady && state_ != State::kHandshaking) return;
    if (queued_callbacks_.empty()) return;
    // write_buffer_ is empty here (cleared when the last write completed); swapping keeps
    // both buffers' capacity, so a steady stream of batches allocates nothing.
    write_buffer_.swap(queued_bytes_);
    flushing_.swap(queued_callbacks_);
  }
  if (in_flight_.empty()) last_progress_ = std::chrono::steady_clock::now();
  for (ReplyCallback& done : flushing_) in_flight_.push_back(std::move(done));
  flushing_.clear();
  ArmWatchdog();
  Write();
}

void RedisConnection::Read() {
  const uint64_t generation = generation_;
  AsyncReadSome([this, generation](const boost::system::error_code& error, size_t bytes) {
    if (generation != generation_) return;
    if (error) {
      Fail(absl::UnavailableError(
               absl::StrCat("connection to Redis at ", address_, " lost: ", error.message())),
           true);
      return;
    }
    last_progress_ = std::chrono::steady_clock::now();
    reader_->Feed(std::string_view(read_buffer_.data(), bytes));
    // What the callbacks send on this loop (commands, answers to clients) goes out once they
    // are all done: a write per connection, while Redis works on this connection's next
    // commands. What they defer to the scope's end (a store's flush of the checks they made)
    // still sends as this connection's reader, so on this connection too. Connections are
    // never destroyed while their io_context runs (see the destructor).
    RedisConnection* const outer = t_reading;
    t_reading = this;
    bool keep_reading = false;
    {
      net::HandlerScope scope(io_);
      keep_reading = ReadReplies(generation);
    }
    t_reading = outer;
    if (keep_reading) Read();
  });
}

bool RedisConnection::ReadReplies(uint64_t generation) {
  while (true) {
    absl::StatusOr<std::optional<RedisReply>> reply = reader_->Next();
    if (!reply.ok()) {
      Fail(absl::UnavailableError(reply.status().message()), true);
      return false;
    }
    if (!reply->has_value()) return true;
    if (!OnReply(**std::move(reply))) return false;
    if (generation != generation_) return false;  // a callback's failure reset us
  }
}

bool RedisConnection::OnReply(RedisReply reply) {
  if (in_flight_.empty()) {
    Fail(absl::UnavailableError(absl::StrCat("unexpected reply from Redis at ", address_)), true);
    return false;
  }
  ReplyCallback done = std::move(in_flight_.front());
  in_flight_.pop_front();
  std::move(done)(std::move(reply));
  return true;
}

void RedisConnection::ArmWatchdog() {
  if (watchdog_armed_) return;
  watchdog_armed_ = true;
  watchdog_timer_.expires_after(options_.reply_timeout / 4 + std::chrono::milliseconds(1));
  watchdog_timer_.async_wait([this](const boost::system::error_code& error) {
    watchdog_armed_ = false;
    if (error || in_flight_.empty()) return;
    if (std::chrono::steady_clock::now() - last_progress_ > options_.reply_timeout) {
      Fail(absl::UnavailableError(absl::StrCat("no reply from Redis at ", address_, " within ",
                                               options_.reply_timeout.count(), " ms")),
           true);
      return;
    }
    ArmWatchdog();
  });
}

void RedisConnection::Fail(const absl::Status& status, bool reconnect) {
  std::vector<ReplyCallback> queued;
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    closed = state_ == State::kClosed;
    if (!closed) state_ = State::kDisconnected;
    queued.swap(queued_callbacks_);
    queued_bytes_.clear();
  }
  ++generation_;  // every handler of the old socket is now stale
  boost::system::error_code ignored;
  resolver_.cancel();
  socket_.close(ignored);
  connect_timer_.cancel();
  writing_ = false;
  write_buffer_.clear();
  std::deque<ReplyCallback> in_flight;
  in_flight.swap(in_flight_);
  absl::Status unavailable = status.code() == absl::StatusCode::kUnavailable
                                 ? status
                                 : absl::UnavailableError(status.message());
  for (ReplyCallback& done : in_flight) std::move(done)(unavailable);
  for (ReplyCallback& done : queued) std::move(done)(unavailable);
  ReportFirst(unavailable);
  if (reconnect && !closed) ScheduleReconnect();
}

void RedisConnection::ScheduleReconnect() {
  reconnect_timer_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.reconnect_max);
  reconnect_timer_.async_wait([this](const boost::system::error_code& error) {
    if (!error) Connect();
  });
}

void RedisConnection::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kClosed;
  }
  reconnect_timer_.cancel();
  watchdog_timer_.cancel();
  Fail(absl::UnavailableError("the Redis store is shutting down"), false);
}

}  // namespace tollgate::redis
