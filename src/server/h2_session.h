// Copyright tollgate authors. One HTTP/2 server connection carrying gRPC unary calls: an
// nghttp2 session fed from and drained to the connection (plain, or TLS once its handshake is
// done: src/net/connection_stream.h) on the connection's loop (nghttp2_session_mem_recv /
// mem_send), with the flood limits of GrpcServerOptions.
//
// Internal to GrpcServer (src/server/grpc_server.h). Threading: an H2Session lives on its
// socket's loop; every member function below runs there, except GrpcResponder::Call's
// Deliver, which posts to it. The connection's reading, writing and timers are in
// h2_session.cc, its calls in h2_streams.cc, nghttp2's callbacks in h2_callbacks.cc, its
// streaming calls in h2_streaming.cc.
#ifndef TOLLGATE_SRC_SERVER_H2_SESSION_H_
#define TOLLGATE_SRC_SERVER_H2_SESSION_H_

#include <nghttp2/nghttp2.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "src/net/connection_stream.h"
#include "src/server/grpc_server.h"
#include "src/server/grpc_wire.h"
#include "src/server/h2_streaming.h"

namespace tollgate::server {

class H2Session;

// What every connection of one server shares with it. Thread-safe.
struct GrpcServerShared {
  GrpcServerShared(GrpcServerOptions options, GrpcMethods methods);
  ~GrpcServerShared();
  GrpcServerShared(const GrpcServerShared&) = delete;
  GrpcServerShared& operator=(const GrpcServerShared&) = delete;

  const GrpcServerOptions options;
  const GrpcMethods methods;
  // options.timers: every connection's time and timeouts.
  Timers* const timers;
  // Built once from `options`; nghttp2 copies them into each new session.
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_option* session_options = nullptr;
  // Bytes taken from nghttp2 and not yet written to a socket, over all connections.
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<bool> shutting_down{false};

  absl::Mutex mu;
  // The open connections, for Shutdown.
  absl::flat_hash_map<H2Session*, std::weak_ptr<H2Session>> sessions ABSL_GUARDED_BY(mu);
};

// What a response is, handed from a responder to the connection's loop.
struct GrpcOutcome {
  bool ok = false;
  std::string message;  // ok: the response message
  absl::Status status;  // !ok
};

struct GrpcResponder::Call {
  std::weak_ptr<H2Session> session;
  boost::asio::io_context* loop = nullptr;
  int32_t stream_id = 0;
  // The server's monotonic micros (GrpcServerOptions::timers); kNoGrpcDeadline: none.
  int64_t deadline_micros = kNoGrpcDeadline;
  // The request's traceparent header (GrpcRequestHeaders::traceparent).
  std::string traceparent;

  // Runs the answer on the loop: at once when called there, else posted.
  void Deliver(GrpcOutcome outcome);
};

class H2Session : public std::enable_shared_from_this<H2Session> {
 public:
  // `stream`: plain, or TLS with its handshake done.
  H2Session(std::shared_ptr<GrpcServerShared> shared, ::tollgate::net::ConnectionStream stream);
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  // Registers with the server, sends SETTINGS and starts reading. On the loop thread.
  void Start();
  // GOAWAY (no new streams); closes once the calls in flight are answered.
  void GoAway();
  // Closes the socket now; calls not answered are dropped.
  void Close();
  // The loop the connection lives on (any thread may read it).
  boost::asio::io_context& loop() const { return loop_; }
  // Answers stream `stream_id` unless it is gone or answered already.
  void Deliver(int32_t stream_id, GrpcOutcome outcome);

 private:
  struct Stream;
  friend struct H2Callbacks;

  // Reading and writing.
  void Read();
  void OnRead(boost::system::error_code error, size_t bytes);
  void Flush();
  // Flush() once the running handler returns (answers delivered by one read of Redis replies
  // go out in one write: net::HandlerScope), else posted; at most one pending at a time.
  void FlushSoon();
  void OnWritten(boost::system::error_code error, size_t bytes);
  // The output of a write that did not fit the socket: counted in the server's buffered
  // bytes until it is written.
  void WriteRest(size_t written);
  bool ReadPaused() const;
  void CloseIfDone();
  // Queues GOAWAY with `error_code` (nghttp2_error_code) and closes once it is written, or
  // after at most a second.
  void Terminate(uint32_t error_code);
  void Tick();
  void ArmTick();

  // Streams and answers.
  Stream* FindStream(int32_t stream_id);
  void OnRequestHeaders(Stream& stream);
  void OnRequestData(Stream& stream, const uint8_t* data, size_t length);
  void OnRequestEnd(Stream& stream);
  // Deadlines (grpc-timeout): one timer per connection, armed for the earliest deadline of
  // the calls not yet answered, and moved only to an earlier one (calls that share a timeout
  // never move it); when it fires, the calls past their deadline are answered
  // DEADLINE_EXCEEDED and it is armed for the next.
  void ArmDeadlines(int64_t when_micros);
  void OnDeadlines();
  void AnswerError(Stream& stream, GrpcStatusCode code, std::string_view message,
                   bool accept_identity = false);
  void AnswerHttp(Stream& stream, int http_status);
  void AnswerMessage(Stream& stream, std::string message);
  bool TakeControlToken();

  // ---- Streaming calls (defined in src/server/h2_streaming.cc) ----
  friend class H2StreamWriter;
  // Starts a streaming call on `stream_id`: its response headers and its handler, in `*call`.
  // A status other than OK is the call's answer instead (too many streaming calls open on
  // this connection, no handler made).
  absl::Status StartStreaming(int32_t stream_id, const GrpcStreamFactory& factory,
                              std::optional<std::chrono::nanoseconds> timeout,
                              std::unique_ptr<H2StreamingCall>* call);
  void StreamingData(H2StreamingCall& call, const uint8_t* data, size_t length);
  void StreamingHalfClose(H2StreamingCall& call);
  // Posted by the writer; the call may be gone by then.
  void StreamingWrite(int32_t stream_id, std::string message);
  void StreamingFinish(int32_t stream_id, const absl::Status& status);
  void FinishStreaming(H2StreamingCall& call, const absl::Status& status);
  // The trailers of stream `stream_id` went out: a streaming call the client has not ended is
  // reset with NO_ERROR.
  void StreamingTrailersSent(int32_t stream_id);
  // Finishes every open streaming call with `status` (GOAWAY).
  void FinishAllStreaming(const absl::Status& status);
  // Finishes `call` with DEADLINE_EXCEEDED when its deadline is past at `now`; returns its
  // deadline when it is still ahead, else kNoGrpcDeadline.
  int64_t StreamingDeadline(H2StreamingCall& call, int64_t now);
  // The streaming call of stream `stream_id`, or nullptr (defined in h2_streams.cc).
  H2StreamingCall* FindStreamingCall(int32_t stream_id);
  size_t streaming_calls_ = 0;

  const std::shared_ptr<GrpcServerShared> shared_;
  const GrpcServerOptions& options_;
  ::tollgate::net::ConnectionStream stream_;
  boost::asio::io_context& loop_;
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer deadline_timer_;
  // When deadline_timer_ fires; kNoGrpcDeadline when it is not armed.
  int64_t deadline_armed_micros_ = kNoGrpcDeadline;
  nghttp2_session* session_ = nullptr;
  absl::flat_hash_map<int32_t, std::unique_ptr<Stream>> streams_;
  // The stream FindStream found last (nullptr once it closed).
  Stream* found_stream_ = nullptr;
  // Closed streams kept for reuse, at most kSpareStreams.
  static constexpr size_t kSpareStreams = 32;
  std::vector<std::unique_ptr<Stream>> spare_streams_;

  std::array<uint8_t, 16 * 1024> read_buffer_;
  std::string out_;  // being written (writing_) or about to be
  // Bytes of out_ added to shared_->buffered_bytes (while an asynchronous write is out).
  int64_t counted_bytes_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool in_recv_ = false;  // inside nghttp2_session_mem_recv: no mem_send now
  bool flush_posted_ = false;
  bool closed_ = false;
  bool terminating_ = false;  // GOAWAY for an error queued: no more reading
  bool going_away_ = false;   // graceful GOAWAY sent
  // Request body bytes held by this connection's open streams.
  size_t held_body_bytes_ = 0;

  // Times in the monotonic micros of the server's Timers (GrpcServerShared::timers).
  int64_t NowMicros() const { return shared_->timers->NowMicros(); }
  int64_t last_read_micros_ = 0;
  int64_t last_write_progress_micros_ = 0;
  int64_t close_by_micros_ = kNoGrpcDeadline;
  std::optional<int64_t> ping_sent_micros_;
  // SETTINGS / PING / PRIORITY / unknown frames: a token bucket.
  double control_tokens_ = 0;
  int64_t control_refilled_micros_ = 0;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_H2_SESSION_H_
