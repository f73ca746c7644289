// Copyright tollgate authors. The floor of a unary gRPC call over HTTP/2 on this machine: a
// minimal server written directly on libnghttp2 (epoll, non-blocking sockets) that
// answers every request on every stream with HTTP 200, `content-type: application/grpc`, one
// length-prefixed message (a RateLimitResponse with `overall_code = OK`, serialized once at
// start) and the trailers `grpc-status: 0`. It reads nothing of the request beyond what
// HTTP/2 needs (no path routing, no message parsing, no deadline): the least any gRPC server
// must do per call, under every gRPC row of bench/service_bench.sh. With --redis, each call
// first waits for one Redis round trip (bench/floor_server.h): the floor under tollgate's
// gRPC + Redis rows. For measurement only; not part of `tollgate serve`.
//
//   h2_floor_server [--listen 127.0.0.1:0] [--max-concurrent-streams N] [--threads N]
//                   [--redis HOST:PORT] [--keys N]
//
// Loops, Redis, output and exit codes: bench/floor_server.h.
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench/floor_server.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace {

constexpr char kProgram[] = "h2_floor_server";
constexpr char kUsage[] =
    "h2_floor_server [--listen HOST:PORT] [--max-concurrent-streams N] [--threads N] "
    "[--redis HOST:PORT] [--keys N]";

uint32_t g_max_concurrent_streams = 1024;

// The one answer, framed: gRPC's 5-byte prefix (not compressed, big-endian length), then the
// serialized RateLimitResponse. Set once in main before any connection.
std::string* g_framed_response = nullptr;

nghttp2_nv Header(const char* name, const char* value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value)), std::strlen(name),
                    std::strlen(value),
                    NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

// One accepted socket and its HTTP/2 server session, on its loop's thread only.
class Connection : public floor_server::Connection {
 public:
  Connection(int fd, floor_server::Loop& loop) : floor_server::Connection(fd), loop_(loop) {}
  ~Connection() override {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }

  // Returns false if the session cannot be set up (the connection is then dropped).
  bool Start(nghttp2_session_callbacks* callbacks, uint32_t max_concurrent_streams) {
    if (nghttp2_session_server_new(&session_, callbacks, this) != 0) return false;
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_concurrent_streams}};
    return nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1) == 0;
  }

  // Reads what the socket holds, answers every finished request, writes what the session has
  // to send. Returns false when the connection is to be closed.
  bool OnReadable() override {
    const bool open = ReadAvailable([this](const char* bytes, size_t size) {
      return nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(bytes), size) >= 0;
    });
    return open && Flush();
  }

  // Writes pending output, then everything the session has to send, gathered into one write.
  // Returns false on a write error or when the session is done.
  bool Flush() override {
    for (;;) {
      if (!WriteOutput()) return false;
      if (wants_output()) return true;  // EPOLLOUT resumes
      for (;;) {
        const uint8_t* data = nullptr;
        const ssize_t length = nghttp2_session_mem_send(session_, &data);
        if (length < 0) return false;
        if (length == 0) break;
        output_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(length));
      }
      if (output_.empty()) break;
    }
    return nghttp2_session_want_read(session_) != 0 || nghttp2_session_want_write(session_) != 0;
  }

  // A request ended (END_STREAM seen): answered now, or after its Redis round trip.
  int OnRequest(int32_t stream_id) { return loop_.Defer(*this, stream_id) ? 0 : Answer(stream_id); }
  void Release(int32_t stream_id) override { Answer(stream_id); }

 private:
  // Headers, the message, then trailers.
  int Answer(int32_t stream_id) {
    const nghttp2_nv headers[] = {Header(":status", "200"),
                                  Header("content-type", "application/grpc")};
    nghttp2_data_provider provider;
    provider.source.ptr = nullptr;
    provider.read_callback = &Connection::ReadMessage;
    return nghttp2_submit_response(session_, stream_id, headers, 2, &provider) == 0
               ? 0
               : NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  // The body of a response: the framed message in one DATA frame, then the trailers (the
  // stream ends with them, not with the DATA frame).
  static ssize_t ReadMessage(nghttp2_session* session, int32_t stream_id, uint8_t* buffer,
                             size_t length, uint32_t* data_flags, nghttp2_data_source* /*source*/,
                             void* /*user_data*/) {
    const std::string& message = *g_framed_response;
    if (length < message.size()) return NGHTTP2_ERR_DEFERRED;  // never with a 16 KB frame
    std::copy(message.begin(), message.end(), buffer);
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const nghttp2_nv trailers[] = {Header("grpc-status", "0")};
    if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0) {
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return static_cast<ssize_t>(message.size());
  }

  floor_server::Loop& loop_;
  nghttp2_session* session_ = nullptr;
};

int OnFrameReceived(nghttp2_session* /*session*/, const nghttp2_frame* frame, void* user_data) {
  const bool request_frame =
      frame->hd.type == NGHTTP2_DATA ||
      (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST);
  if (request_frame && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    return static_cast<Connection*>(user_data)->OnRequest(frame->hd.stream_id);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const floor_server::Options options = floor_server::ParseOptions(
      argc, argv, kProgram, kUsage, [](const std::string& flag, const std::string& value) {
        if (flag != "--max-concurrent-streams") return false;
        const long streams = std::atol(value.c_str());
        if (streams < 1) {
          floor_server::Usage(kProgram, kUsage,
                              "--max-concurrent-streams needs a positive integer");
        }
        g_max_concurrent_streams = static_cast<uint32_t>(streams);
        return true;
      });

  envoy::service::ratelimit::v3::RateLimitResponse response;
  response.set_overall_code(envoy::service::ratelimit::v3::RateLimitResponse::OK);
  const std::string serialized = response.SerializeAsString();
  std::string framed(5, '\0');
  const uint32_t size = static_cast<uint32_t>(serialized.size());
  framed[1] = static_cast<char>(size >> 24);
  framed[2] = static_cast<char>(size >> 16);
  framed[3] = static_cast<char>(size >> 8);
  framed[4] = static_cast<char>(size);
  framed += serialized;
  g_framed_response = &framed;

  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameReceived);

  floor_server::Serve(kProgram, options, [callbacks](int fd, floor_server::Loop& loop) {
    auto connection = std::make_unique<Connection>(fd, loop);
    if (!connection->Start(callbacks, g_max_concurrent_streams))
      return std::unique_ptr<Connection>();
    return connection;
  });
}
