// Copyright tollgate authors. What the files of an H2Session share (src/server/h2_session.h):
// a call's stream, nghttp2's callbacks into the session (h2_callbacks.cc), and the helpers
// both use. Internal to h2_session.cc, h2_streams.cc, h2_callbacks.cc and h2_streaming.cc.
#ifndef TOLLGATE_SRC_SERVER_H2_STREAM_H_
#define TOLLGATE_SRC_SERVER_H2_STREAM_H_

#include <nghttp2/nghttp2.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "src/server/grpc_server.h"
#include "src/server/grpc_wire.h"
#include "src/server/h2_session.h"
#include "src/server/h2_streaming.h"

namespace tollgate::server {

// How long a connection that is being closed may take to write its last frames.
inline constexpr int64_t kH2CloseGraceMicros = 1'000'000;

// A name/value pair for nghttp2_submit_*, which copy them: views of temporaries are fine.
inline nghttp2_nv H2Header(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

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

// nghttp2's callbacks (registered once in GrpcServerShared), each forwarding to the session
// in `user_data`.
struct H2Callbacks {
  // Control frames (SETTINGS, PING, PRIORITY, unknown types) spend a token of the session's
  // bucket; without one the connection is terminated with ENHANCE_YOUR_CALM.
  static int OnBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data);
  // A request's HEADERS open a stream (a spare one when there is).
  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  // Each request header, counted against max_header_list_bytes.
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_length, const uint8_t* value, size_t value_length, uint8_t,
                      void* user_data);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t length, void* user_data);
  // A closed stream is kept for reuse, up to H2Session::kSpareStreams.
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data);
  // A response's DATA: the message's prefix and the message (a Stream in source->ptr), then
  // its trailers (grpc-status 0).
  static ssize_t ReadResponse(nghttp2_session* nghttp2, int32_t stream_id, uint8_t* buffer,
                              size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                              void*);
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_H2_STREAM_H_
