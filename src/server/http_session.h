// Copyright tollgate authors. One HTTP/1.1 connection, and the set of open ones.
#ifndef TOLLGATE_SRC_SERVER_HTTP_SESSION_H_
#define TOLLGATE_SRC_SERVER_HTTP_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "src/net/stream_socket.h"
#include "src/server/http_handler.h"
#include "tollgate/timers.h"

namespace tollgate::server {

class HttpSession;

// The open connections, so that shutdown can close the idle ones. Thread-safe.
class SessionRegistry {
 public:
  // Returns an id for Remove, or 0 once Close() was called (the session must then close).
  uint64_t Add(const std::weak_ptr<HttpSession>& session);
  void Remove(uint64_t id);
  // Refuses further Adds and returns the sessions open now.
  std::vector<std::weak_ptr<HttpSession>> Close();
  // Waits until no session is registered, at most `timeout`. True when none is.
  bool AwaitEmpty(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, std::weak_ptr<HttpSession>> sessions_ ABSL_GUARDED_BY(mu_);
};

struct HttpSessionLimits {
  // Larger request bodies are refused with 400 and the connection closed.
  size_t max_body_bytes = 64 * 1024;
  // Larger request heads are refused with 431 and the connection closed.
  uint32_t max_header_bytes = 8 * 1024;
  // A connection that sends nothing (or too slowly) for this long is closed, as is one that
  // does not read its response for this long.
  std::chrono::milliseconds idle_timeout{10'000};
};

// What every session of one server shares; each session holds a reference, so a session
// that outlives its server's drain (closed later by its loop) still finds it.
struct HttpSessionContext {
  std::shared_ptr<HttpHandler> handler;
  HttpSessionLimits limits;
  SessionRegistry registry;
  // The sessions' monotonic time (deadlines, the EOF probe). Non-null.
  std::shared_ptr<Timers> timers;
};

// Reads requests one at a time from a keep-alive connection, answers each through the
// handler, and closes when the client does, on an error, on idle timeout, or at shutdown
// (after finishing the request in flight). All work runs on the socket's event loop, one
// thread; an answer that comes from another thread is dispatched back to it.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // REQUIRES: `socket`'s executor is one single-threaded event loop; `context` non-null.
  HttpSession(boost::asio::ip::tcp::socket socket, std::shared_ptr<HttpSessionContext> context);
  ~HttpSession();

  // Registers with the context's registry and starts reading.
  void Start();
  // Thread-safe. Closes the connection now if no request is in flight, otherwise right
  // after the response to it is written.
  void CloseWhenIdle();

 private:
  // Starts the next request: a fresh parser, then Parse().
  void ReadHeader();
  // Feeds what is buffered to the parser; dispatches a complete request, answers a parse
  // error, or reads more.
  void Parse();
  void ReadMore();
  void OnRead(boost::beast::error_code error, size_t bytes);
  // Answers a read error that a client should hear about (malformed or too large), or
  // closes quietly.
  void FailRead(boost::beast::error_code error);
  void Dispatch();
  void Write(HttpResponse response);
  // Writes write_buffer_ from `offset` on: what the socket takes now, the rest when it has
  // room; then `next` (OnWrite, or Parse after "100 Continue").
  void Send(size_t offset, void (HttpSession::*next)(boost::beast::error_code));
  void OnWrite(boost::beast::error_code error);
  void OnContinueWritten(boost::beast::error_code error);
  void Close();
  // The phase in progress (reading a head or a body, writing a response) must end by
  // `deadline`, else the connection is closed. One timer per session, re-armed only when it
  // fires: moving the deadline costs no system call.
  // Times are micros of context_->timers' monotonic clock; kNever: no deadline.
  void SetDeadline(int64_t deadline_micros);
  void ArmTimer(int64_t when_micros);
  int64_t NowMicros() const { return context_->timers->NowMicros(); }
  int64_t IdleTimeoutMicros() const { return context_->limits.idle_timeout.count() * 1000; }
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  void OnTimer(boost::beast::error_code error);
  // A client that sends its last request and closes its side (shutdown of writes) sends the
  // end of its stream with the request's last bytes: the read that takes them drains the
  // socket, and no later event tells of the end (net::StreamSocket). So a session that
  // answered a request and waits for the next looks once, within kEofProbePeriodMicros, whether
  // the peer closed (one non-blocking peek), and closes if it did. While requests come, the
  // timer ticks at that period (a few wake-ups a second per connection, none per request);
  // an idle connection's timer sleeps until its deadline.
  static constexpr int64_t kEofProbePeriodMicros = 100'000;

  ::tollgate::net::StreamSocket socket_;
  boost::asio::io_context& loop_;  // the socket's
  boost::asio::steady_timer timer_;
  const std::shared_ptr<HttpSessionContext> context_;
  uint64_t registry_id_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  // The response being written; its capacity is kept for the next one.
  std::string write_buffer_;
  // The head of the request being read is parsed (its body is being read).
  bool head_done_ = false;
  int64_t deadline_micros_ = kNever;
  // When the armed timer fires (valid while timer_armed_).
  int64_t timer_at_micros_ = 0;
  bool timer_armed_ = false;
  // A response was written since the last probe for a closed peer.
  bool probe_pending_ = false;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  // From the end of a request's head until its response is written.
  bool busy_ = false;
  bool stopping_ = false;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_HTTP_SESSION_H_
