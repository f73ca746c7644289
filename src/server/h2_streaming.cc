// Copyright tollgate authors. Bidirectional streaming calls on an H2Session: the session's
// members declared under "Streaming calls" in h2_session.h, the call's data source and its
// writer.
#include "src/server/h2_streaming.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "src/server/h2_session.h"
#include "src/server/h2_stream.h"

namespace tollgate::server {

namespace net = boost::asio;

namespace {

GrpcStatusCode CodeOf(const absl::Status& status) {
  return static_cast<GrpcStatusCode>(static_cast<int>(status.code()));
}

}  // namespace

// ---- H2StreamWriter -------------------------------------------------------------------------

bool H2StreamWriter::Write(std::string message) {
  if (!open()) return false;
  std::shared_ptr<H2Session> session = session_.lock();
  if (session == nullptr) {
    MarkClosed();
    return false;
  }
  net::post(*loop_, [session = std::move(session), id = stream_id_,
                     message = std::move(message)]() mutable {
    session->StreamingWrite(id, std::move(message));
  });
  return true;
}

void H2StreamWriter::Finish(const absl::Status& status) {
  if (!open_.exchange(false, std::memory_order_acq_rel)) return;
  std::shared_ptr<H2Session> session = session_.lock();
  if (session == nullptr) return;
  net::post(*loop_, [session = std::move(session), id = stream_id_, status] {
    session->StreamingFinish(id, status);
  });
}

// ---- H2StreamingCall ------------------------------------------------------------------------

H2StreamingCall::H2StreamingCall(int32_t id, std::shared_ptr<H2StreamWriter> stream_writer,
                                 size_t* open_calls_counter)
    : stream_id(id), writer(std::move(stream_writer)), open_calls(open_calls_counter) {
  ++*open_calls;
}

H2StreamingCall::~H2StreamingCall() {
  --*open_calls;
  writer->MarkClosed();
  if (handler != nullptr) handler->OnClose();
}

ssize_t H2StreamingCall::ReadOut(nghttp2_session* session, int32_t stream_id, uint8_t* buffer,
                                 size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                                 void*) {
  auto* call = static_cast<H2StreamingCall*>(source->ptr);
  size_t n = 0;
  while (n < length && !call->out.empty()) {
    const std::string& front = call->out.front();
    const size_t part = std::min(length - n, front.size() - call->sent);
    const char* from = front.data() + call->sent;
    std::memcpy(buffer + n, from, part);
    n += part;
    call->sent += part;
    if (call->sent == front.size()) {
      call->queued_bytes -= front.size();
      call->out.pop_front();
      call->sent = 0;
    }
  }
  if (!call->out.empty()) return static_cast<ssize_t>(n);
  if (!call->finishing) {
    return n > 0 ? static_cast<ssize_t>(n) : static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED);
  }
  *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
  const std::string status = GrpcStatusValue(call->code);
  const std::string encoded = PercentEncodeGrpcMessage(call->status_message);
  nghttp2_nv trailers[2] = {H2Header("grpc-status", status), H2Header("grpc-message", encoded)};
  if (nghttp2_submit_trailer(session, stream_id, trailers, encoded.empty() ? 1 : 2) != 0) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return static_cast<ssize_t>(n);
}

// ---- H2Session's streaming members ----------------------------------------------------------

absl::Status H2Session::StartStreaming(int32_t stream_id, const GrpcStreamFactory& factory,
                                       std::optional<std::chrono::nanoseconds> timeout,
                                       std::unique_ptr<H2StreamingCall>* call) {
  if (streaming_calls_ >= options_.max_streaming_calls_per_connection) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ",
                                                     options_.max_streaming_calls_per_connection,
                                                     " streaming calls open on this connection"));
  }
  auto writer = std::make_shared<H2StreamWriter>(weak_from_this(), &loop_, stream_id);
  auto made = std::make_unique<H2StreamingCall>(stream_id, writer, &streaming_calls_);
  if (timeout.has_value()) {
    const int64_t now = NowMicros();
    const int64_t micros = std::chrono::duration_cast<std::chrono::microseconds>(*timeout).count();
    made->deadline_micros = micros >= kNoGrpcDeadline - now ? kNoGrpcDeadline : now + micros;
    if (made->deadline_micros < deadline_armed_micros_) ArmDeadlines(made->deadline_micros);
  }
  const nghttp2_nv headers[] = {H2Header(":status", "200"),
                                H2Header("content-type", "application/grpc")};
  nghttp2_data_provider provider;
  provider.source.ptr = made.get();
  provider.read_callback = &H2StreamingCall::ReadOut;
  if (nghttp2_submit_response(session_, stream_id, headers, std::size(headers), &provider) != 0) {
    return absl::InternalError("could not start the response");
  }
  // The handler is made last: it may write at once (posted, so after this returns).
  made->handler = factory(writer);
  if (made->handler == nullptr) {
    *call = std::move(made);
    FinishStreaming(**call, absl::InternalError("the method made no handler for the call"));
    return absl::OkStatus();
  }
  *call = std::move(made);
  return absl::OkStatus();
}

void H2Session::StreamingData(H2StreamingCall& call, const uint8_t* data, size_t length) {
  if (call.finishing) return;
  call.incoming.append(reinterpret_cast<const char*>(data), length);
  size_t offset = 0;
  while (!call.finishing && call.incoming.size() - offset >= kGrpcMessagePrefixBytes) {
    const std::string_view rest = std::string_view(call.incoming).substr(offset);
    const GrpcUnaryBody prefix =
        ParseGrpcUnaryBody(rest.substr(0, kGrpcMessagePrefixBytes), options_.max_message_bytes);
    switch (prefix.result) {
      case GrpcUnaryBody::Result::kTooLarge:
        FinishStreaming(call,
                        absl::ResourceExhaustedError(absl::StrCat(
                            "request message of ", prefix.announced_length,
                            " bytes is larger than the limit of ", options_.max_message_bytes)));
        break;
      case GrpcUnaryBody::Result::kCompressed:
        FinishStreaming(call, absl::UnimplementedError("compressed messages are not supported"));
        break;
      case GrpcUnaryBody::Result::kBadFlag:
        FinishStreaming(call, absl::InternalError("bad message flag"));
        break;
      default:
        break;
    }
    if (call.finishing) break;
    const size_t total = kGrpcMessagePrefixBytes + prefix.announced_length;
    if (rest.size() < total) break;
    call.handler->OnMessage(rest.substr(kGrpcMessagePrefixBytes, prefix.announced_length));
    offset += total;
  }
  if (call.finishing) {
    std::string().swap(call.incoming);
  } else {
    call.incoming.erase(0, offset);
  }
}

void H2Session::StreamingHalfClose(H2StreamingCall& call) {
  call.half_closed = true;
  if (call.finishing) return;
  if (!call.incoming.empty()) {
    FinishStreaming(call, absl::InternalError("truncated request message"));
    return;
  }
  call.handler->OnHalfClose();
}

void H2Session::StreamingWrite(int32_t stream_id, std::string message) {
  if (closed_) return;
  H2StreamingCall* call = FindStreamingCall(stream_id);
  if (call == nullptr || call->finishing) return;
  const size_t framed = kGrpcMessagePrefixBytes + message.size();
  if (call->queued_bytes + framed > options_.max_stream_queued_bytes) {
    // The client does not take what it is sent: the stream goes, the connection stays.
    call->finishing = true;
    call->reset = true;
    call->writer->MarkClosed();
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_ENHANCE_YOUR_CALM);
    FlushSoon();
    return;
  }
  message.insert(0, GrpcMessagePrefix(static_cast<uint32_t>(message.size())));
  call->queued_bytes += message.size();
  call->out.push_back(std::move(message));
  nghttp2_session_resume_data(session_, stream_id);
  FlushSoon();
}

void H2Session::StreamingFinish(int32_t stream_id, const absl::Status& status) {
  if (closed_) return;
  H2StreamingCall* call = FindStreamingCall(stream_id);
  if (call == nullptr) return;
  FinishStreaming(*call, status);
  FlushSoon();
}

void H2Session::FinishStreaming(H2StreamingCall& call, const absl::Status& status) {
  if (call.finishing) return;
  call.finishing = true;
  call.writer->MarkClosed();
  call.code = CodeOf(status);
  call.status_message = std::string(status.message());
  nghttp2_session_resume_data(session_, call.stream_id);
}

void H2Session::StreamingTrailersSent(int32_t stream_id) {
  H2StreamingCall* call = FindStreamingCall(stream_id);
  if (call == nullptr || call->half_closed) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
}

void H2Session::FinishAllStreaming(const absl::Status& status) {
  if (streaming_calls_ == 0) return;
  for (const auto& [id, stream] : streams_) {
    if (H2StreamingCall* call = FindStreamingCall(id)) FinishStreaming(*call, status);
  }
}

int64_t H2Session::StreamingDeadline(H2StreamingCall& call, int64_t now) {
  if (call.finishing || call.deadline_micros == kNoGrpcDeadline) return kNoGrpcDeadline;
  if (call.deadline_micros > now) return call.deadline_micros;
  FinishStreaming(call, absl::DeadlineExceededError("deadline exceeded"));
  return kNoGrpcDeadline;
}

}  // namespace tollgate::server
