// Copyright tollgate authors. A gRPC server for unary methods, on the process's event loops:
// HTTP/2 by libnghttp2 (one session per connection, on the connection's loop), gRPC's unary
// protocol (src/server/grpc_wire.h) on top.
//
//   GrpcMethods methods;
//   methods.AddUnary("/pkg.Service/Method", [](std::string_view request, GrpcResponder call) {
//     ... parse `request` (valid only during this call) ...
//     std::move(call).Finish(response_bytes);       // now, or later from any thread
//   });
//   auto server = GrpcServer::Start(loops, {.address = {"127.0.0.1", 8081}}, std::move(methods));
//   ... (*server)->Shutdown(std::chrono::seconds(10));
//
// With GrpcServerOptions::tls the port serves TLS (or mTLS): each connection's handshake
// (src/server/grpc_tls_handshake.h) comes first, and HTTP/2 starts once it is done.
//
// What a call is answered when the handler is not reached (grpc-status in trailers-only
// responses unless said otherwise):
// - :method other than POST: HTTP 405; content-type other than application/grpc[+proto]:
//   HTTP 415 (the spec's answer, so non-gRPC clients do not read a 200).
// - an unknown path: UNIMPLEMENTED.
// - grpc-encoding other than identity, or a message with the compressed flag:
//   UNIMPLEMENTED with grpc-accept-encoding: identity.
// - a message larger than max_message_bytes: RESOURCE_EXHAUSTED (from its 5-byte prefix,
//   before the payload is read).
// - no message, a truncated one, two messages, a malformed grpc-timeout, a header given
//   twice: INTERNAL.
// - grpc-timeout passed before the handler finished: DEADLINE_EXCEEDED (a timer on the
//   connection's loop); the handler's later Finish is ignored.
// - the server is shutting down: new streams are refused by GOAWAY.
// A handler maps an unparsable message to INVALID_ARGUMENT itself (it is the one that
// parses).
#ifndef TOLLGATE_SRC_SERVER_GRPC_SERVER_H_
#define TOLLGATE_SRC_SERVER_GRPC_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_stream.h"
#include "src/server/grpc_wire.h"
#include "src/server/listen_address.h"
#include "tollgate/timers.h"

namespace tollgate::server {

class GrpcTls;

// Bounds on what one client may make the server hold or do. Each is a `tollgate serve`
// option (--grpc-...); docs/envoy.md, "Limits", lists them with their defaults.
struct GrpcServerOptions {
  ListenAddress address{"127.0.0.1", 8081};
  // Largest request message; larger is RESOURCE_EXHAUSTED.
  uint32_t max_message_bytes = 64 * 1024;
  // SETTINGS_MAX_CONCURRENT_STREAMS: calls open at once on one connection; a stream beyond it
  // is refused (RST_STREAM REFUSED_STREAM) by nghttp2.
  uint32_t max_concurrent_streams = 100;
  // SETTINGS_MAX_HEADER_LIST_SIZE, enforced: a request whose header list (names + values +
  // 32 per field, RFC 9113 6.5.2) is larger gets HTTP 431 and its stream reset.
  uint32_t max_header_list_bytes = 16 * 1024;
  // CONTINUATION frames after one HEADERS; more closes the connection (nghttp2's limit,
  // CVE-2024-28182).
  uint32_t max_continuations = 8;
  // RST_STREAM received, as a token bucket: `reset_burst` at once, refilled at `reset_rate`
  // a second; beyond it GOAWAY and close (nghttp2's limit, CVE-2023-44487 "rapid reset").
  uint32_t reset_burst = 1000;
  uint32_t reset_rate = 33;
  // Entries in one SETTINGS frame; more closes the connection with ENHANCE_YOUR_CALM.
  uint32_t max_settings = 32;
  // SETTINGS, PING, PRIORITY and unknown-type frames, as a token bucket: `control_burst` at
  // once, refilled at `control_rate` a second. Beyond it GOAWAY ENHANCE_YOUR_CALM and close
  // (floods of frames that cost work but carry no call).
  uint32_t control_burst = 1000;
  uint32_t control_rate = 100;
  // Output of one connection waiting for the socket; reading from the connection pauses
  // while it is over this (a client that does not read stops being read).
  size_t max_buffered_bytes_per_connection = 256 * 1024;
  // Output waiting for sockets across the server's connections; over it, every connection
  // with output waiting pauses reading until its own output is written.
  size_t max_buffered_bytes = 64 * 1024 * 1024;
  // A connection with no call open and nothing received for this long gets GOAWAY and is
  // closed. Also bounds how long output may wait for a peer that does not read.
  std::chrono::milliseconds idle_timeout{300'000};
  // When nothing was received for this long, the server sends PING; without an answer
  // within keepalive_timeout the connection is closed. 0 turns keepalive off.
  std::chrono::milliseconds keepalive_interval{60'000};
  std::chrono::milliseconds keepalive_timeout{20'000};
  // TLS on the port (src/server/grpc_tls.h); nullptr: plaintext (h2c). Each connection takes
  // the context current when it is accepted. A handshake runs before HTTP/2 starts; at most
  // `max_tls_handshakes` run at once over the whole server (a connection beyond them is
  // closed at once) and each must finish within `tls_handshake_timeout` (else it is closed).
  std::shared_ptr<GrpcTls> tls;
  // Monotonic time of the connections' timeouts, keepalives and the calls' deadlines: only
  // NowMicros() is used, so it never runs anything on the loops. nullptr: a monotonic clock of
  // the server's own (LoopTimers over no loops, tollgate/timers.h).
  std::shared_ptr<Timers> timers;
  uint32_t max_tls_handshakes = 256;
  std::chrono::milliseconds tls_handshake_timeout{10'000};
  // Streaming calls (src/server/grpc_stream.h): how many may be open at once on one
  // connection, and how many bytes of one call's messages may wait for its client's
  // flow-control window before the call is reset.
  uint32_t max_streaming_calls_per_connection = 16;
  size_t max_stream_queued_bytes = 1024 * 1024;
};

// The answer to one call. Move-only; Finish exactly once, from any thread (it posts to the
// connection's loop when called elsewhere). Finishing a call whose stream was reset, whose
// connection closed, or that already got DEADLINE_EXCEEDED does nothing. A responder
// destroyed without Finish answers INTERNAL ("the handler dropped the call"). A responder
// whose connection is gone (closed, or destroyed with its EventLoops) does nothing at all.
// GrpcResponder::deadline_micros() of a call without a grpc-timeout.
inline constexpr int64_t kNoGrpcDeadline = std::numeric_limits<int64_t>::max();

class GrpcResponder {
 public:
  struct Call;  // shared with the connection (src/server/h2_session.h)

  GrpcResponder() = default;
  explicit GrpcResponder(std::shared_ptr<Call> call) : call_(std::move(call)) {}
  GrpcResponder(GrpcResponder&&) noexcept = default;
  GrpcResponder& operator=(GrpcResponder&& other) noexcept;
  GrpcResponder(const GrpcResponder&) = delete;
  GrpcResponder& operator=(const GrpcResponder&) = delete;
  ~GrpcResponder();

  // OK with `response` as the one response message (serialized bytes).
  void Finish(std::string response) &&;
  // A status other than OK (OK here is answered with an empty message): trailers-only, with
  // `status.message()` as grpc-message. absl::StatusCode numbers are gRPC's.
  void Finish(const absl::Status& status) &&;

  // When the client's grpc-timeout ends, in the server's monotonic microseconds
  // (GrpcServerOptions::timers' NowMicros), or kNoGrpcDeadline without one.
  int64_t deadline_micros() const;
  // The request's W3C traceparent header (GrpcRequestHeaders::traceparent); "" when it had
  // none, or after Finish.
  std::string_view traceparent() const;
  // False after Finish, after a move, for a default-constructed responder.
  bool active() const { return call_ != nullptr; }

 private:
  std::shared_ptr<Call> call_;
};

// Runs for each call of its method on the connection's loop thread, possibly on several
// threads at once: it must be thread-safe and must not block (finish later instead).
// `request` is the request message's bytes, valid only until the handler returns.
using GrpcUnaryHandler =
    absl::AnyInvocable<void(std::string_view request, GrpcResponder call) const>;

// The methods a server answers, by path ("/package.Service/Method"). Filled before Start
// and read-only after (lookups take no lock).
class GrpcMethods {
 public:
  // Replaces a handler already added for `path`.
  void AddUnary(std::string path, GrpcUnaryHandler handler);
  // nullptr when no method has `path`.
  const GrpcUnaryHandler* Find(std::string_view path) const;
  // A bidirectional streaming method (src/server/grpc_stream.h). A path is unary or
  // streaming, not both: adding one removes the other.
  void AddStreaming(std::string path, GrpcStreamFactory factory);
  // nullptr when no streaming method has `path`.
  const GrpcStreamFactory* FindStreaming(std::string_view path) const;

 private:
  absl::flat_hash_map<std::string, GrpcUnaryHandler> handlers_;
  absl::flat_hash_map<std::string, GrpcStreamFactory> streaming_;
};

struct GrpcServerShared;  // what connections share with the server (src/server/h2_session.h)

// A running server. Thread-safe: every method may be called from any thread except a loop
// thread of `loops` (Shutdown waits for the loops' work).
class GrpcServer {
 public:
  // Binds and listens (Listener on `loops`), then serves each connection on its loop.
  // Unavailable naming the address when it cannot be bound; InvalidArgument for an option
  // of 0 that must be positive. REQUIRES: `loops` outlives the server (and keeps running
  // until Shutdown returns).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(EventLoops& loops,
                                                           GrpcServerOptions options,
                                                           GrpcMethods methods);

  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;
  // Shutdown(0 s): what is still open is closed at once.
  ~GrpcServer();

  uint16_t port() const;
  // "HOST:PORT" as bound.
  std::string address() const;
  // True from the first Shutdown on (health checks answer NOT_SERVING).
  bool shutting_down() const;
  // Connections open now (with TLS, those whose handshake is done).
  int connections() const;

  // Stops accepting; each connection gets GOAWAY (no new streams), its calls in flight are
  // answered, then it is closed (a TLS handshake in progress is closed when it ends). Returns true
  // when every connection closed within `drain_timeout`; false when some were closed by force after
  // it. Idempotent.
  bool Shutdown(std::chrono::milliseconds drain_timeout);

 private:
  GrpcServer() = default;
  std::shared_ptr<Listener> listener_;
  std::shared_ptr<GrpcServerShared> shared_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_GRPC_SERVER_H_
