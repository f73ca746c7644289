// Copyright tollgate authors. One asynchronous, auto-pipelined connection to Redis.
#ifndef TOLLGATE_SRC_STORE_REDIS_CONNECTION_H_
#define TOLLGATE_SRC_STORE_REDIS_CONNECTION_H_

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/net/stream_socket.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/resp.h"

namespace tollgate::redis {

// The reply to one command: a RedisReply (which may be an error reply such as NOSCRIPT),
// or Unavailable when the command could not be sent or its reply never came (not
// connected, connection dropped, no reply within the reply timeout, shutting down).
using ReplyCallback = absl::AnyInvocable<void(absl::StatusOr<RedisReply>) &&>;

struct ConnectionOptions {
  RedisUrl url;
  std::chrono::milliseconds connect_timeout{1000};
  // With commands in flight and no reply for this long, the connection is considered dead:
  // it is dropped (every pending call fails) and re-established.
  std::chrono::milliseconds reply_timeout{2000};
  // Reconnect backoff: doubles from min to max after each failed attempt.
  std::chrono::milliseconds reconnect_min{20};
  std::chrono::milliseconds reconnect_max{1000};
  // TLS: every connection does a TLS handshake over TCP with this context (see
  // MakeTlsContext in tls.h), sends the host as SNI and, when the context verifies peers,
  // checks that Redis' certificate names the host. Null: made by Start from the URL's
  // tls_options for a rediss:// URL (Start reports InvalidArgument for unreadable files),
  // plain TCP otherwise.
  std::shared_ptr<boost::asio::ssl::context> tls_context;
};

// A connection that connects, authenticates (AUTH), selects the database (SELECT) and
// checks the server version (INFO server, 7.0 or later) on its own, and reconnects with
// backoff whenever it drops.
//
// Auto-pipelining: `Send` only queues the command; every command queued before the event
// loop's next turn goes out in one write, and replies are matched to callbacks in order.
// Commands sent by reply callbacks (on the I/O thread) go out as soon as the replies of
// that read are processed, so Redis works on them while the next read is processed.
//
// Thread-safe: `Send` and `ready` may be called from any thread. Callbacks run on the
// io_context's thread, never inline from `Send` except when failing fast (not connected).
// Every callback runs exactly once.
class RedisConnection {
 public:
  RedisConnection(boost::asio::io_context& io, ConnectionOptions options);
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;
  // REQUIRES: Shutdown() has run and the io_context no longer runs.
  ~RedisConnection();

  // Starts the first connection attempt. `first_result` runs once, on the io thread, with
  // OK when the connection is ready, or why the first attempt failed (Unavailable for a
  // network failure, PermissionDenied for AUTH, FailedPrecondition for a Redis older than
  // 7.0, ...). Later attempts continue in the background either way.
  void Start(absl::AnyInvocable<void(absl::Status) &&> first_result);

  // Queues `command` (RESP, see FormatCommand). Fails fast with Unavailable when not
  // connected.
  void Send(std::string_view command, ReplyCallback done);
  // Send when ready (true: `done` was taken); else false, leaving `done` to the caller.
  bool TrySend(std::string_view command, ReplyCallback& done);

  // The connection whose replies the current thread is handing to their callbacks (inside
  // its read handler), or nullptr.
  static RedisConnection* ReadingOnThisThread();

  // An opaque tag for the owner's use (ConnectionPool marks its round-robin connections).
  void set_owner(const void* owner) { owner_ = owner; }
  const void* owner() const { return owner_; }

  // Connected, authenticated and checked.
  bool ready() const;

  // Closes for good and fails everything pending. Must run on the io thread.
  void Shutdown();

 private:
  enum class State { kConnecting, kHandshaking, kReady, kDisconnected, kClosed };

  void Connect();
  void StartTls();
  void OnConnected();
  // The socket, or the TLS stream over it. `handler(error, bytes)` runs on the io thread;
  // a TLS stream stays alive until its handlers have run.
  template <typename Handler>
  void AsyncReadSome(Handler handler);
  template <typename Handler>
  void AsyncWrite(Handler handler);
  // Writes write_buffer_: at once as far as the socket takes it, the rest when it has room.
  void Write();
  void OnWritten(uint64_t generation, const boost::system::error_code& error, bool flush_again);
  void Handshake();
  void SendInternal(std::string_view command, ReplyCallback done);
  // Appends to the queue and posts a Flush unless one is posted already.
  void QueueLocked(std::string_view command, ReplyCallback done, bool* post_flush)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Flush() on this I/O thread soon: when the running handler returns (net::HandlerScope),
  // else posted.
  void ScheduleFlush();
  void Flush();
  // Hands every complete reply read so far to its callback. False when the connection
  // failed meanwhile (stop reading).
  bool ReadReplies(uint64_t generation);
  void Read();
  // False when the connection failed (the caller must stop reading).
  bool OnReply(RedisReply reply);
  void Fail(const absl::Status& status, bool reconnect);
  void ScheduleReconnect();
  void ArmWatchdog();
  void ReportFirst(absl::Status status);

  boost::asio::io_context& io_;
  const void* owner_ = nullptr;
  ConnectionOptions options_;  // tls_context is filled in by Start for a rediss:// URL
  const std::string address_;  // host:port, for messages

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kDisconnected;
  // Commands queued since the last Flush, back to back, and their callbacks in order.
  std::string queued_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<ReplyCallback> queued_callbacks_ ABSL_GUARDED_BY(mu_);
  bool flush_posted_ ABSL_GUARDED_BY(mu_) = false;

  // Only touched on the io thread.
  boost::asio::ip::tcp::resolver resolver_;
  net::StreamSocket socket_;
  // Over socket_ when TLS is on; replaced on every (re)connect.
  std::shared_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  boost::asio::steady_timer connect_timer_;
  boost::asio::steady_timer reconnect_timer_;
  boost::asio::steady_timer watchdog_timer_;
  uint64_t generation_ = 0;  // bumps on every (re)connect; stale handlers compare it
  std::deque<ReplyCallback> in_flight_;
  std::string write_buffer_;
  size_t write_offset_ = 0;              // bytes of write_buffer_ written
  std::vector<ReplyCallback> flushing_;  // Flush's scratch, kept for its capacity
  bool writing_ = false;
  std::array<char, 16384> read_buffer_{};
  std::unique_ptr<ReplyReader> reader_;
  std::chrono::steady_clock::time_point last_progress_;
  bool watchdog_armed_ = false;
  std::chrono::milliseconds backoff_;
  absl::Status handshake_error_;
  absl::AnyInvocable<void(absl::Status) &&> first_result_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CONNECTION_H_
