// Copyright tollgate authors.
#include "src/server/h2_session.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "spdlog/spdlog.h"
#include "src/net/handler_scope.h"

namespace tollgate::server {

namespace net = boost::asio;

namespace {

nghttp2_nv Header(std::string_view name, std::string_view value) {
  // nghttp2_submit_* copy the name/value pairs: views of temporaries are fine.
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// How long a connection that is being closed may take to write its last frames.
constexpr int64_t kCloseGraceMicros = 1'000'000;

int64_t Micros(std::chrono::milliseconds duration) { return duration.count() * 1000; }

}  // namespace

struct H2Session::Stream {
  int32_t id = 0;
  enum class State { kHeaders, kReceiving, kDispatched, kAnswered };
  State state = State::kHeaders;
  GrpcRequestHeaders headers;
  size_t header_list_bytes = 0;
  const GrpcUnaryHandler* handler = nullptr;
  std::string body;
  std::shared_ptr<GrpcResponder::Call> call;
  // The response: the message's prefix and the message, sent as DATA, then trailers
  // (grpc-status 0).
  std::array<char, kGrpcMessagePrefixBytes> prefix{};
  std::string response;
  size_t response_offset = 0;  // of prefix + response
  // A streaming call's state (src/server/h2_streaming.h); nullptr for a unary call.
  std::unique_ptr<H2StreamingCall> streaming;

  // As new, keeping the strings' capacity when small (a closed stream is reused for the
  // connection's next one): a spare holds at most kKeptBytes per string.
  void Reset() {
    constexpr size_t kKeptBytes = 1024;
    id = 0;
    state = State::kHeaders;
    if (header_list_bytes > kKeptBytes) {
      headers = GrpcRequestHeaders();
    } else {
      headers.Clear();
    }
    header_list_bytes = 0;
    handler = nullptr;
    if (body.capacity() > kKeptBytes) std::string().swap(body);
    body.clear();
    call.reset();
    if (response.capacity() > kKeptBytes) std::string().swap(response);
    response.clear();
    response_offset = 0;
    streaming.reset();  // tells its handler the call is over
  }
};

// nghttp2's callbacks, each forwarding to the session in `user_data`.
struct H2Callbacks {
  static H2Session& Of(void* user_data) { return *static_cast<H2Session*>(user_data); }

  static int OnBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
    bool control = false;
    switch (hd->type) {
      case NGHTTP2_SETTINGS:
      case NGHTTP2_PING:
        control = (hd->flags & NGHTTP2_FLAG_ACK) == 0;
        break;
      case NGHTTP2_PRIORITY:
        control = true;
        break;
      case NGHTTP2_DATA:
      case NGHTTP2_HEADERS:
      case NGHTTP2_RST_STREAM:  // nghttp2's own rate limit
      case NGHTTP2_PUSH_PROMISE:
      case NGHTTP2_GOAWAY:
      case NGHTTP2_WINDOW_UPDATE:
      case NGHTTP2_CONTINUATION:  // nghttp2's max_continuations
        break;
      default:
        control = true;  // unknown types cost a read and nothing else, still bounded
        break;
    }
    H2Session& session = Of(user_data);
    if (control && !session.TakeControlToken()) {
      session.Terminate(NGHTTP2_ENHANCE_YOUR_CALM);
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
  }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    H2Session& session = Of(user_data);
    std::unique_ptr<H2Session::Stream> stream;
    if (session.spare_streams_.empty()) {
      stream = std::make_unique<H2Session::Stream>();
    } else {
      stream = std::move(session.spare_streams_.back());
      session.spare_streams_.pop_back();
    }
    stream->id = frame->hd.stream_id;
    session.found_stream_ = stream.get();
    session.streams_[stream->id] = std::move(stream);
    return 0;
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_length, const uint8_t* value, size_t value_length, uint8_t,
                      void* user_data) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    H2Session& session = Of(user_data);
    H2Session::Stream* stream = session.FindStream(frame->hd.stream_id);
    if (stream == nullptr) return 0;
    // RFC 9113 6.5.2: a field's size is its name, its value and 32.
    stream->header_list_bytes += name_length + value_length + 32;
    if (stream->header_list_bytes > session.options_.max_header_list_bytes) return 0;
    stream->headers.Add(std::string_view(reinterpret_cast<const char*>(name), name_length),
                        std::string_view(reinterpret_cast<const char*>(value), value_length));
    return 0;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    H2Session& session = Of(user_data);
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
      case NGHTTP2_DATA: {
        H2Session::Stream* stream = session.FindStream(frame->hd.stream_id);
        if (stream == nullptr) return 0;
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          session.OnRequestHeaders(*stream);
        }
        if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) session.OnRequestEnd(*stream);
        return 0;
      }
      case NGHTTP2_PING:
        if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) session.ping_sent_micros_.reset();
        return 0;
      default:
        return 0;
    }
  }

  // nghttp2 sends GOAWAY with an error itself when a limit of its own is hit (the reset
  // rate, SETTINGS entries, CONTINUATION): such a connection is closed once it is written,
  // not left to send the rest of its flood.
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      Of(user_data).StreamingTrailersSent(frame->hd.stream_id);  // h2_streaming.cc
    }
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      H2Session& session = Of(user_data);
      session.terminating_ = true;
      session.close_by_micros_ =
          std::min(session.close_by_micros_, session.NowMicros() + kCloseGraceMicros);
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t length, void* user_data) {
    H2Session& session = Of(user_data);
    H2Session::Stream* stream = session.FindStream(stream_id);
    if (stream != nullptr) session.OnRequestData(*stream, data, length);
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data) {
    H2Session& session = Of(user_data);
    auto it = session.streams_.find(stream_id);
    if (it == session.streams_.end()) return 0;
    session.held_body_bytes_ -= it->second->body.size();
    if (session.found_stream_ == it->second.get()) session.found_stream_ = nullptr;
    // Kept for the connection's next streams, up to H2Session::kSpareStreams.
    if (session.spare_streams_.size() < H2Session::kSpareStreams) {
      it->second->Reset();
      session.spare_streams_.push_back(std::move(it->second));
    }
    session.streams_.erase(it);
    return 0;
  }

  static ssize_t ReadResponse(nghttp2_session* nghttp2, int32_t stream_id, uint8_t* buffer,
                              size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                              void*) {
    auto* stream = static_cast<H2Session::Stream*>(source->ptr);
    const size_t total = stream->prefix.size() + stream->response.size();
    size_t n = 0;
    while (n < length && stream->response_offset < total) {
      const size_t offset = stream->response_offset;
      const bool in_prefix = offset < stream->prefix.size();
      const char* from = in_prefix ? stream->prefix.data() + offset
                                   : stream->response.data() + (offset - stream->prefix.size());
      const size_t part =
          std::min(length - n, in_prefix ? stream->prefix.size() - offset : total - offset);
      std::memcpy(buffer + n, from, part);
      n += part;
      stream->response_offset += part;
    }
    if (stream->response_offset == total) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const nghttp2_nv trailers[] = {Header("grpc-status", "0")};
      if (nghttp2_submit_trailer(nghttp2, stream_id, trailers, 1) != 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
      stream->response.clear();
    }
    return static_cast<ssize_t>(n);
  }
};

GrpcServerShared::GrpcServerShared(GrpcServerOptions options_in, GrpcMethods methods_in)
    : options(std::move(options_in)), methods(std::move(methods_in)), timers(options.timers.get()) {
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, &H2Callbacks::OnBeginFrame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &H2Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &H2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &H2Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &H2Callbacks::OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &H2Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &H2Callbacks::OnFrameSend);

  nghttp2_option_new(&session_options);
  nghttp2_option_set_stream_reset_rate_limit(session_options, options.reset_burst,
                                             options.reset_rate);
  nghttp2_option_set_max_settings(session_options, options.max_settings);
  nghttp2_option_set_max_continuations(session_options, options.max_continuations);
  // Closed streams are not kept for priorities (RFC 9113 deprecates them).
  nghttp2_option_set_no_closed_streams(session_options, 1);
  // The header block a client may make nghttp2 decode is bounded by max_continuations; a
  // single field by nghttp2 itself (64 KiB).
}

GrpcServerShared::~GrpcServerShared() {
  nghttp2_option_del(session_options);
  nghttp2_session_callbacks_del(callbacks);
}

void GrpcResponder::Call::Deliver(GrpcOutcome outcome) {
  // A connection that is gone (closed, or destroyed with its loop) takes no answer, and its
  // loop is not touched.
  std::shared_ptr<H2Session> live = session.lock();
  if (live == nullptr) return;
  if (loop->get_executor().running_in_this_thread()) {
    live->Deliver(stream_id, std::move(outcome));
    return;
  }
  net::post(*loop,
            [live = std::move(live), id = stream_id, outcome = std::move(outcome)]() mutable {
              live->Deliver(id, std::move(outcome));
            });
}

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
  close_by_micros_ = std::min(close_by_micros_, NowMicros() + kCloseGraceMicros);
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

H2StreamingCall* H2Session::FindStreamingCall(int32_t stream_id) {
  Stream* stream = FindStream(stream_id);
  return stream == nullptr ? nullptr : stream->streaming.get();
}

H2Session::Stream* H2Session::FindStream(int32_t stream_id) {
  // The callbacks of one frame (each header of a HEADERS block) ask for the same stream.
  if (found_stream_ != nullptr && found_stream_->id == stream_id) return found_stream_;
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return nullptr;
  found_stream_ = it->second.get();
  return found_stream_;
}

void H2Session::OnRequestHeaders(Stream& stream) {
  if (stream.state != Stream::State::kHeaders) return;
  stream.state = Stream::State::kReceiving;
  if (stream.header_list_bytes > options_.max_header_list_bytes) {
    AnswerHttp(stream, 431);
    return;
  }
  const GrpcRequestCheck check = CheckGrpcRequestHeaders(stream.headers);
  switch (check.result) {
    case GrpcRequestCheck::Result::kOk:
      break;
    case GrpcRequestCheck::Result::kMethodNotAllowed:
      AnswerHttp(stream, 405);
      return;
    case GrpcRequestCheck::Result::kUnsupportedMediaType:
      AnswerHttp(stream, 415);
      return;
    case GrpcRequestCheck::Result::kBadHeaders:
      AnswerError(stream, GrpcStatusCode::kInternal, check.problem);
      return;
    case GrpcRequestCheck::Result::kUnsupportedEncoding:
      AnswerError(stream, GrpcStatusCode::kUnimplemented,
                  "grpc-encoding " + stream.headers.grpc_encoding + " is not supported",
                  /*accept_identity=*/true);
      return;
  }
  if (const GrpcStreamFactory* factory = shared_->methods.FindStreaming(stream.headers.path)) {
    // A streaming call (h2_streaming.cc): it answers as it goes.
    stream.state = Stream::State::kDispatched;
    const absl::Status started =
        StartStreaming(stream.id, *factory, check.timeout, &stream.streaming);
    if (!started.ok()) {
      AnswerError(stream, static_cast<GrpcStatusCode>(static_cast<int>(started.code())),
                  std::string_view(started.message().data(), started.message().size()));
    }
    stream.headers.Clear();
    return;
  }
  stream.handler = shared_->methods.Find(stream.headers.path);
  if (stream.handler == nullptr) {
    AnswerError(stream, GrpcStatusCode::kUnimplemented, "unknown method " + stream.headers.path);
    return;
  }
  stream.call = std::make_shared<GrpcResponder::Call>();
  stream.call->session = weak_from_this();
  stream.call->loop = &loop_;
  stream.call->stream_id = stream.id;
  if (!stream.headers.traceparent.empty()) stream.call->traceparent = stream.headers.traceparent;
  if (check.timeout.has_value()) {
    const int64_t now = NowMicros();
    const int64_t timeout =
        std::chrono::duration_cast<std::chrono::microseconds>(*check.timeout).count();
    stream.call->deadline_micros =
        timeout >= kNoGrpcDeadline - now ? kNoGrpcDeadline : now + timeout;
    if (stream.call->deadline_micros < deadline_armed_micros_) {
      ArmDeadlines(stream.call->deadline_micros);
    }
  }
  // Headers on a stream the client already half-closed skip DATA: OnRequestEnd follows.
  stream.headers.Clear();  // only the path and traceparent were needed from here on
}

void H2Session::OnRequestData(Stream& stream, const uint8_t* data, size_t length) {
  if (stream.streaming != nullptr) {
    StreamingData(*stream.streaming, data, length);  // h2_streaming.cc
    return;
  }
  if (stream.state != Stream::State::kReceiving || stream.handler == nullptr) return;
  const size_t limit = kGrpcMessagePrefixBytes + options_.max_message_bytes;
  if (held_body_bytes_ + length > options_.max_buffered_bytes_per_connection) {
    AnswerError(stream, GrpcStatusCode::kResourceExhausted,
                "too many request bytes in flight on this connection");
    return;
  }
  const size_t before = stream.body.size();
  stream.body.append(reinterpret_cast<const char*>(data), length);
  held_body_bytes_ += length;
  if (before < kGrpcMessagePrefixBytes && stream.body.size() >= kGrpcMessagePrefixBytes) {
    const GrpcUnaryBody prefix =
        ParseGrpcUnaryBody(std::string_view(stream.body).substr(0, kGrpcMessagePrefixBytes),
                           options_.max_message_bytes);
    if (prefix.result == GrpcUnaryBody::Result::kTooLarge) {
      AnswerError(stream, GrpcStatusCode::kResourceExhausted,
                  "request message of " + std::to_string(prefix.announced_length) +
                      " bytes is larger than the limit of " +
                      std::to_string(options_.max_message_bytes));
      return;
    }
    if (prefix.result == GrpcUnaryBody::Result::kCompressed) {
      AnswerError(stream, GrpcStatusCode::kUnimplemented, "compressed messages are not supported",
                  /*accept_identity=*/true);
      return;
    }
  }
  if (stream.body.size() > limit) {
    AnswerError(stream, GrpcStatusCode::kInternal, "more than one request message");
  }
}

void H2Session::OnRequestEnd(Stream& stream) {
  if (stream.streaming != nullptr) {
    StreamingHalfClose(*stream.streaming);  // h2_streaming.cc
    return;
  }
  if (stream.state != Stream::State::kReceiving || stream.handler == nullptr) return;
  const GrpcUnaryBody body = ParseGrpcUnaryBody(stream.body, options_.max_message_bytes);
  switch (body.result) {
    case GrpcUnaryBody::Result::kMessage:
      break;
    case GrpcUnaryBody::Result::kIncomplete:
      AnswerError(stream, GrpcStatusCode::kInternal,
                  stream.body.empty() ? "no request message" : "truncated request message");
      return;
    case GrpcUnaryBody::Result::kTooLarge:
      AnswerError(stream, GrpcStatusCode::kResourceExhausted, "request message too large");
      return;
    case GrpcUnaryBody::Result::kCompressed:
      AnswerError(stream, GrpcStatusCode::kUnimplemented, "compressed messages are not supported",
                  /*accept_identity=*/true);
      return;
    case GrpcUnaryBody::Result::kBadFlag:
      AnswerError(stream, GrpcStatusCode::kInternal, "bad message flag");
      return;
    case GrpcUnaryBody::Result::kTrailingBytes:
      AnswerError(stream, GrpcStatusCode::kInternal, "more than one request message");
      return;
  }
  if (stream.call->deadline_micros != kNoGrpcDeadline &&
      NowMicros() >= stream.call->deadline_micros) {
    AnswerError(stream, GrpcStatusCode::kDeadlineExceeded, "deadline exceeded");
    return;
  }
  stream.state = Stream::State::kDispatched;
  // The handler may finish at once: Deliver finds the stream by id (still in the map).
  const int32_t id = stream.id;
  (*stream.handler)(body.message, GrpcResponder(stream.call));
  // The body is no longer needed (and may be large); the stream may be answered already.
  if (Stream* still = FindStream(id)) {
    held_body_bytes_ -= still->body.size();
    std::string().swap(still->body);
  }
}

void H2Session::ArmDeadlines(int64_t when_micros) {
  deadline_armed_micros_ = when_micros;
  // Cancels a wait armed for later (its handler sees operation_aborted and does nothing).
  deadline_timer_.expires_after(
      std::chrono::microseconds(std::max<int64_t>(0, when_micros - NowMicros())));
  deadline_timer_.async_wait([weak = weak_from_this()](boost::system::error_code error) {
    if (error) return;
    if (std::shared_ptr<H2Session> self = weak.lock()) self->OnDeadlines();
  });
}

void H2Session::OnDeadlines() {
  deadline_armed_micros_ = kNoGrpcDeadline;
  if (closed_) return;
  const int64_t now = NowMicros();
  int64_t next = kNoGrpcDeadline;
  bool answered = false;
  for (auto& [id, stream] : streams_) {
    if (stream->streaming != nullptr) {  // h2_streaming.cc
      next = std::min(next, StreamingDeadline(*stream->streaming, now));
      answered = true;
      continue;
    }
    if (stream->call == nullptr || stream->state == Stream::State::kAnswered) continue;
    if (stream->call->deadline_micros <= now) {
      AnswerError(*stream, GrpcStatusCode::kDeadlineExceeded, "deadline exceeded");
      answered = true;
    } else {
      next = std::min(next, stream->call->deadline_micros);
    }
  }
  if (next != kNoGrpcDeadline) ArmDeadlines(next);
  if (answered) Flush();
}

void H2Session::Deliver(int32_t stream_id, GrpcOutcome outcome) {
  if (closed_) return;
  Stream* stream = FindStream(stream_id);
  if (stream == nullptr || stream->state != Stream::State::kDispatched) return;
  if (outcome.ok) {
    AnswerMessage(*stream, std::move(outcome.message));
  } else {
    GrpcStatusCode code = static_cast<GrpcStatusCode>(outcome.status.code());
    if (code == GrpcStatusCode::kOk) code = GrpcStatusCode::kUnknown;
    const absl::string_view message = outcome.status.message();
    AnswerError(*stream, code, std::string_view(message.data(), message.size()));
  }
  // Inside the session's own read the answer goes out with that read's Flush; otherwise
  // (a store's reply) with the other answers of the same turn.
  if (!in_recv_) FlushSoon();
}

void H2Session::FlushSoon() {
  if (flush_posted_ || closed_) return;
  flush_posted_ = true;
  ::tollgate::net::HandlerScope::Work flush = [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->Flush();
  };
  if (::tollgate::net::HandlerScope::Defer(loop_, flush)) return;
  net::post(loop_, [flush = std::move(flush)]() mutable { std::move(flush)(); });
}

void H2Session::AnswerError(Stream& stream, GrpcStatusCode code, std::string_view message,
                            bool accept_identity) {
  stream.state = Stream::State::kAnswered;
  held_body_bytes_ -= stream.body.size();
  std::string().swap(stream.body);
  const std::string status = GrpcStatusValue(code);
  const std::string encoded = PercentEncodeGrpcMessage(message);
  nghttp2_nv headers[5];
  size_t count = 0;
  headers[count++] = Header(":status", "200");
  headers[count++] = Header("content-type", "application/grpc");
  headers[count++] = Header("grpc-status", status);
  if (!encoded.empty()) headers[count++] = Header("grpc-message", encoded);
  if (accept_identity) headers[count++] = Header("grpc-accept-encoding", "identity");
  nghttp2_submit_response(session_, stream.id, headers, count, nullptr);
}

void H2Session::AnswerHttp(Stream& stream, int http_status) {
  stream.state = Stream::State::kAnswered;
  const std::string status = std::to_string(http_status);
  const nghttp2_nv headers[] = {Header(":status", status)};
  nghttp2_submit_response(session_, stream.id, headers, 1, nullptr);
}

void H2Session::AnswerMessage(Stream& stream, std::string message) {
  stream.state = Stream::State::kAnswered;
  const std::string prefix = GrpcMessagePrefix(static_cast<uint32_t>(message.size()));
  std::copy(prefix.begin(), prefix.end(), stream.prefix.begin());
  stream.response = std::move(message);
  stream.response_offset = 0;
  const nghttp2_nv headers[] = {Header(":status", "200"),
                                Header("content-type", "application/grpc")};
  nghttp2_data_provider provider;
  provider.source.ptr = &stream;
  provider.read_callback = &H2Callbacks::ReadResponse;
  nghttp2_submit_response(session_, stream.id, headers, std::size(headers), &provider);
}

}  // namespace tollgate::server
