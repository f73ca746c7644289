// Copyright tollgate authors. One bidirectional streaming call on an H2Session
// (src/server/grpc_stream.h says what the server does for it): its handler, the incoming
// bytes of a message not complete yet, and the outgoing messages waiting for the client's
// flow-control window.
//
// Internal to the gRPC server. Threading: an H2StreamingCall lives in its H2Session's stream,
// on the connection's loop; only its H2StreamWriter is used from other threads.
#ifndef TOLLGATE_SRC_SERVER_H2_STREAMING_H_
#define TOLLGATE_SRC_SERVER_H2_STREAMING_H_

#include <nghttp2/nghttp2.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "boost/asio/io_context.hpp"
#include "src/server/grpc_server.h"
#include "src/server/grpc_stream.h"
#include "src/server/grpc_wire.h"

namespace tollgate::server {

class H2Session;

// The writer a streaming handler gets: each call posts to the connection's loop.
class H2StreamWriter final : public GrpcStreamWriter {
 public:
  H2StreamWriter(std::weak_ptr<H2Session> session, boost::asio::io_context* loop, int32_t stream_id)
      : session_(std::move(session)), loop_(loop), stream_id_(stream_id) {}

  bool Write(std::string message) override;
  void Finish(const absl::Status& status) override;
  bool open() const override { return open_.load(std::memory_order_acquire); }

  // The call is over (finished, reset or closed): later writes are refused.
  void MarkClosed() { open_.store(false, std::memory_order_release); }

 private:
  const std::weak_ptr<H2Session> session_;
  boost::asio::io_context* const loop_;
  const int32_t stream_id_;
  std::atomic<bool> open_{true};
};

struct H2StreamingCall {
  // `open_calls` is the session's count of open streaming calls: incremented here,
  // decremented when the call is destroyed.
  H2StreamingCall(int32_t stream_id, std::shared_ptr<H2StreamWriter> writer, size_t* open_calls);
  // Closes the writer and tells the handler (OnClose), unless it was never made.
  ~H2StreamingCall();
  H2StreamingCall(const H2StreamingCall&) = delete;
  H2StreamingCall& operator=(const H2StreamingCall&) = delete;

  const int32_t stream_id;
  const std::shared_ptr<H2StreamWriter> writer;
  size_t* const open_calls;
  std::unique_ptr<GrpcStreamHandler> handler;
  // The server's monotonic micros; kNoGrpcDeadline: none.
  int64_t deadline_micros = kNoGrpcDeadline;

  // Incoming: the bytes of a message not complete yet (at most a prefix and
  // max_message_bytes).
  std::string incoming;
  // Outgoing: messages with their prefix, oldest first; `sent` bytes of the first are out.
  std::deque<std::string> out;
  size_t sent = 0;
  size_t queued_bytes = 0;
  // Finish was called: the trailers follow what is queued, and nothing more is read.
  bool finishing = false;
  GrpcStatusCode code = GrpcStatusCode::kOk;
  std::string status_message;
  // The stream was reset by the server (its queue over the bound).
  bool reset = false;
  // The client has ended its side (END_STREAM).
  bool half_closed = false;

  // nghttp2's data source callback for the response: what is queued, then (finishing) the
  // trailers; NGHTTP2_ERR_DEFERRED while nothing is queued.
  static ssize_t ReadOut(nghttp2_session* session, int32_t stream_id, uint8_t* buffer,
                         size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                         void* user_data);
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_H2_STREAMING_H_
