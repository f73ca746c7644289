// Copyright tollgate authors. An H2Session's calls: a request's headers, message and end,
// its deadline, and its answer.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "boost/asio/post.hpp"
#include "src/net/handler_scope.h"
#include "src/server/h2_session.h"
#include "src/server/h2_stream.h"

namespace tollgate::server {

namespace net = boost::asio;

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

H2Session::Stream* H2Session::FindStream(int32_t stream_id) {
  // The callbacks of one frame (each header of a HEADERS block) ask for the same stream.
  if (found_stream_ != nullptr && found_stream_->id == stream_id) return found_stream_;
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return nullptr;
  found_stream_ = it->second.get();
  return found_stream_;
}

H2StreamingCall* H2Session::FindStreamingCall(int32_t stream_id) {
  Stream* stream = FindStream(stream_id);
  return stream == nullptr ? nullptr : stream->streaming.get();
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
  headers[count++] = H2Header(":status", "200");
  headers[count++] = H2Header("content-type", "application/grpc");
  headers[count++] = H2Header("grpc-status", status);
  if (!encoded.empty()) headers[count++] = H2Header("grpc-message", encoded);
  if (accept_identity) headers[count++] = H2Header("grpc-accept-encoding", "identity");
  nghttp2_submit_response(session_, stream.id, headers, count, nullptr);
}

void H2Session::AnswerHttp(Stream& stream, int http_status) {
  stream.state = Stream::State::kAnswered;
  const std::string status = std::to_string(http_status);
  const nghttp2_nv headers[] = {H2Header(":status", status)};
  nghttp2_submit_response(session_, stream.id, headers, 1, nullptr);
}

void H2Session::AnswerMessage(Stream& stream, std::string message) {
  stream.state = Stream::State::kAnswered;
  const std::string prefix = GrpcMessagePrefix(static_cast<uint32_t>(message.size()));
  std::copy(prefix.begin(), prefix.end(), stream.prefix.begin());
  stream.response = std::move(message);
  stream.response_offset = 0;
  const nghttp2_nv headers[] = {H2Header(":status", "200"),
                                H2Header("content-type", "application/grpc")};
  nghttp2_data_provider provider;
  provider.source.ptr = &stream;
  provider.read_callback = &H2Callbacks::ReadResponse;
  nghttp2_submit_response(session_, stream.id, headers, std::size(headers), &provider);
}

}  // namespace tollgate::server
