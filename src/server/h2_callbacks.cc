// Copyright tollgate authors. nghttp2's callbacks into an H2Session, and the server-wide
// nghttp2 objects that carry them.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "src/server/h2_stream.h"

namespace tollgate::server {

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

int H2Callbacks::OnBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
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
  H2Session& session = *static_cast<H2Session*>(user_data);
  if (control && !session.TakeControlToken()) {
    session.Terminate(NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

int H2Callbacks::OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  H2Session& session = *static_cast<H2Session*>(user_data);
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

int H2Callbacks::OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                          size_t name_length, const uint8_t* value, size_t value_length, uint8_t,
                          void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  H2Session& session = *static_cast<H2Session*>(user_data);
  H2Session::Stream* stream = session.FindStream(frame->hd.stream_id);
  if (stream == nullptr) return 0;
  // RFC 9113 6.5.2: a field's size is its name, its value and 32.
  stream->header_list_bytes += name_length + value_length + 32;
  if (stream->header_list_bytes > session.options_.max_header_list_bytes) return 0;
  stream->headers.Add(std::string_view(reinterpret_cast<const char*>(name), name_length),
                      std::string_view(reinterpret_cast<const char*>(value), value_length));
  return 0;
}

int H2Callbacks::OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  H2Session& session = *static_cast<H2Session*>(user_data);
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
int H2Callbacks::OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    static_cast<H2Session*>(user_data)->StreamingTrailersSent(frame->hd.stream_id);
  }
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    H2Session& session = *static_cast<H2Session*>(user_data);
    session.terminating_ = true;
    session.close_by_micros_ =
        std::min(session.close_by_micros_, session.NowMicros() + kH2CloseGraceMicros);
  }
  return 0;
}

int H2Callbacks::OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                             size_t length, void* user_data) {
  H2Session& session = *static_cast<H2Session*>(user_data);
  H2Session::Stream* stream = session.FindStream(stream_id);
  if (stream != nullptr) session.OnRequestData(*stream, data, length);
  return 0;
}

int H2Callbacks::OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data) {
  H2Session& session = *static_cast<H2Session*>(user_data);
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

ssize_t H2Callbacks::ReadResponse(nghttp2_session* nghttp2, int32_t stream_id, uint8_t* buffer,
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
    const nghttp2_nv trailers[] = {H2Header("grpc-status", "0")};
    if (nghttp2_submit_trailer(nghttp2, stream_id, trailers, 1) != 0) {
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    stream->response.clear();
  }
  return static_cast<ssize_t>(n);
}

}  // namespace tollgate::server
