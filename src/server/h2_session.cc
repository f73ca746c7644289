// Copyright tollgate authors.
#include "src/server/h2_session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "spdlog/spdlog.h"
#include "src/net/handler_scope.h"
#include "src/server/h2_stream.h"

namespace tollgate::server {

namespace net = boost::asio;

namespace {

int64_t Micros(std::chrono::milliseconds duration) { return duration.count() * 1000; }

}  // namespace

H2Session::H2Session(std::shared_ptr<GrpcServerShared> shared,
                     ::tollgate::net::ConnectionStream stream)
    : shared_(std::move(shared)),
      options_(shared_->options),
      stream_(std::move(stream)),
      loop_(static_cast<net::io_context&>(stream_.socket().get_executor().context())),
      tick_timer_(stream_.socket().get_executor()),
      deadline_timer_(stream_.socket().get_executor()) {
  nghttp2_session_server_new2(&session_, shared_->callbacks, this, shared_->session_options);
  last_read_micros_ = last_write_progress_micros_ = control_refilled_micros_ = NowMicros();
  control_tokens_ = options_.control_burst;
}

H2Session::~H2Session() {
  shared_->buffered_bytes.fetch_sub(counted_bytes_, std::memory_order_relaxed);
  // Streams first: the callbacks nghttp2_session_del may run find no stream.
  found_stream_ = nullptr;
  streams_.clear();
  nghttp2_session_del(session_);
  absl::MutexLock lock(&shared_->mu);
  shared_->sessions.erase(this);
}

void H2Session::Start() {
  {
    absl::MutexLock lock(&shared_->mu);
    shared_->sessions[this] = weak_from_this();
  }
  boost::system::error_code ignored;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ignored);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, options_.max_header_list_bytes},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings)) != 0) {
    Close();
    return;
  }
  if (shared_->shutting_down.load(std::memory_order_acquire)) GoAway();
  Flush();
  Read();
  ArmTick();
}

bool H2Session::ReadPaused() const {
  if (!writing_) return false;
  return out_.size() >= options_.max_buffered_bytes_per_connection ||
         shared_->buffered_bytes.load(std::memory_order_relaxed) >=
             static_cast<int64_t>(options_.max_buffered_bytes);
}

void H2Session::Read() {
  if (closed_ || reading_ || terminating_ || ReadPaused()) return;
  if (nghttp2_session_want_read(session_) == 0) return;
  reading_ = true;
  stream_.ReadSome(net::buffer(read_buffer_),
                   [self = shared_from_this()](boost::system::error_code error, size_t bytes) {
                     self->OnRead(error, bytes);
                   });
}

void H2Session::OnRead(boost::system::error_code error, size_t bytes) {
  reading_ = false;
  if (closed_) return;
  if (error) {
    Close();
    return;
  }
  // The store calls the requests of this read make (Redis commands) leave in one write
  // when this handler returns.
  ::tollgate::net::HandlerScope scope(loop_);
  last_read_micros_ = NowMicros();
  ping_sent_micros_.reset();  // anything received shows the peer is there
  in_recv_ = true;
  const ssize_t processed = nghttp2_session_mem_recv(session_, read_buffer_.data(), bytes);
  in_recv_ = false;
  if (closed_) return;
  if (processed < 0) {
    if (!terminating_) {
      spdlog::debug("grpc: closing a connection: {}",
                    nghttp2_strerror(static_cast<int>(processed)));
      Terminate(processed == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM
                                                 : NGHTTP2_PROTOCOL_ERROR);
    }
  }
  Flush();
  Read();
}

void H2Session::Flush() {
  if (closed_ || writing_ || in_recv_) return;
  const size_t cap = options_.max_buffered_bytes_per_connection;
  for (;;) {
    while (out_.size() < cap) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        Close();
        return;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out_.empty()) break;
    last_write_progress_micros_ = NowMicros();
    // Usually all of it fits the socket's buffer: written here, no handler, no counting.
    // (Over TLS nothing is written here: WriteRest writes it all.)
    boost::system::error_code error;
    const size_t written = stream_.WriteNow(net::buffer(out_), error);
    if (error) {
      Close();
      return;
    }
    if (written < out_.size()) {
      WriteRest(written);
      return;
    }
    out_.clear();
  }
  CloseIfDone();
}

void H2Session::WriteRest(size_t written) {
  out_.erase(0, written);
  writing_ = true;
  counted_bytes_ = static_cast<int64_t>(out_.size());
  shared_->buffered_bytes.fetch_add(counted_bytes_, std::memory_order_relaxed);
  stream_.AsyncWrite(net::buffer(out_),
                     [self = shared_from_this()](boost::system::error_code error, size_t bytes) {
                       self->OnWritten(error, bytes);
                     });
}

void H2Session::OnWritten(boost::system::error_code error, size_t bytes) {
  writing_ = false;
  shared_->buffered_bytes.fetch_sub(counted_bytes_, std::memory_order_relaxed);
  counted_bytes_ = 0;
  if (closed_) return;
  out_.clear();
  if (error) {
    Close();
    return;
  }
  last_write_progress_micros_ = NowMicros();
  Flush();
  Read();
}

void H2Session::CloseIfDone() {
  if (closed_ || writing_) return;
  const bool want_read = nghttp2_session_want_read(session_) != 0;
  const bool want_write = nghttp2_session_want_write(session_) != 0;
  if (terminating_ && !want_write) {
    Close();
    return;
  }
  if (!want_read && !want_write) {
    Close();
    return;
  }
  if (going_away_ && streams_.empty() && !want_write) Close();
}

void H2Session::Terminate(uint32_t error_code) {
  if (terminating_) return;
  terminating_ = true;
  nghttp2_session_terminate_session(session_, error_code);
  close_by_micros_ = std::min(close_by_micros_, NowMicros() + kH2CloseGraceMicros);
  ArmTick();
}

void H2Session::GoAway() {
  if (closed_ || going_away_) return;
  going_away_ = true;
  FinishAllStreaming(absl::UnavailableError("the server is shutting down"));  // h2_streaming.cc
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  Flush();
}

void H2Session::Close() {
  if (closed_) return;
  closed_ = true;
  stream_.Close();
  tick_timer_.cancel();
  deadline_timer_.cancel();
  found_stream_ = nullptr;
  streams_.clear();
  held_body_bytes_ = 0;
  absl::MutexLock lock(&shared_->mu);
  shared_->sessions.erase(this);
}

void H2Session::ArmTick() {
  if (closed_) return;
  std::chrono::milliseconds period = options_.idle_timeout;
  if (options_.keepalive_interval.count() > 0) {
    period = std::min({period, options_.keepalive_interval, options_.keepalive_timeout});
  }
  period = std::clamp(period / 2, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  const int64_t now = NowMicros();
  const int64_t when = std::min(now + Micros(period), close_by_micros_);
  tick_timer_.expires_after(std::chrono::microseconds(std::max<int64_t>(0, when - now)));
  tick_timer_.async_wait([self = shared_from_this()](boost::system::error_code error) {
    if (!error) self->Tick();
  });
}

void H2Session::Tick() {
  if (closed_) return;
  const int64_t now = NowMicros();
  if (now >= close_by_micros_) {
    Close();
    return;
  }
  if (writing_ && now - last_write_progress_micros_ >= Micros(options_.idle_timeout)) {
    Close();  // the peer does not read
    return;
  }
  if (streams_.empty() && now - last_read_micros_ >= Micros(options_.idle_timeout)) {
    Terminate(NGHTTP2_NO_ERROR);
    Flush();
  } else if (options_.keepalive_interval.count() > 0) {
    if (ping_sent_micros_.has_value()) {
      if (now - *ping_sent_micros_ >= Micros(options_.keepalive_timeout)) {
        Close();
        return;
      }
    } else if (now - last_read_micros_ >= Micros(options_.keepalive_interval)) {
      ping_sent_micros_ = now;
      nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
      Flush();
    }
  }
  ArmTick();
}

bool H2Session::TakeControlToken() {
  const int64_t now = NowMicros();
  const double elapsed = static_cast<double>(now - control_refilled_micros_) / 1e6;
  control_refilled_micros_ = now;
  control_tokens_ =
      std::min<double>(options_.control_burst, control_tokens_ + elapsed * options_.control_rate);
  if (control_tokens_ < 1) return false;
  control_tokens_ -= 1;
  return true;
}

}  // namespace tollgate::server
