// Copyright tollgate authors. The process's event loops, and a listener that spreads
// accepted connections over them.
//
//   auto loops = EventLoops::Start(2);
//   auto listener = Listener::Start(**loops, {"127.0.0.1", 8080},
//                                   [](boost::asio::ip::tcp::socket socket) { ... });
//   ... (*listener)->Stop(); (*loops)->Stop();
//
// One model for the whole service: `threads` io_contexts, each run by exactly one thread.
// A connection lives on the loop its socket was accepted onto, and everything it does
// (reading, answering, its timers) runs on that loop's thread: single-threaded per
// connection, so no strands and no locks on a connection's own state. Work that must reach
// another loop posts to it.
#ifndef TOLLGATE_SRC_SERVER_EVENT_LOOPS_H_
#define TOLLGATE_SRC_SERVER_EVENT_LOOPS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "src/server/listen_address.h"

namespace tollgate::server {

// `size()` io_contexts, each run by one thread of its own until Stop(). Thread-safe.
class EventLoops {
 public:
  // Starts `threads` loops (0: one per hardware thread, at least 1). InvalidArgument for a
  // negative count.
  static absl::StatusOr<std::unique_ptr<EventLoops>> Start(int threads);

  EventLoops(const EventLoops&) = delete;
  EventLoops& operator=(const EventLoops&) = delete;
  // Stop(), then joins the threads. REQUIRES: not called on a loop thread.
  ~EventLoops();

  int size() const { return static_cast<int>(loops_.size()); }
  boost::asio::io_context& loop(int index) { return loops_[index]->io; }
  // The index of the loop whose thread is calling, or -1 on any other thread.
  static int CurrentIndex();

  // Stops every loop: handlers not yet run are dropped (their owners are destroyed with the
  // io_contexts). Servers drain their connections before this. Idempotent.
  void Stop();
  // Joins the loop threads. REQUIRES: Stop() was called; not on a loop thread.
  void Join();

 private:
  struct Loop {
    boost::asio::io_context io{1};
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
    std::thread thread;
  };
  EventLoops() = default;

  std::vector<std::unique_ptr<Loop>> loops_;
};

// Accepts TCP connections on one address and hands each to `on_accept`, on the loop the
// socket belongs to: the loops in turn, counted per listener (so that the connections of
// each server spread over every loop, whatever the other servers accept). Accept errors (out
// of descriptors) back off for 100 ms instead of spinning. Thread-safe.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Runs on the socket's own loop thread.
  using AcceptCallback = std::function<void(boost::asio::ip::tcp::socket socket)>;

  // Resolves, binds (SO_REUSEADDR) and listens. Unavailable naming the address when it
  // cannot be resolved or bound. REQUIRES: `loops` outlives the listener.
  static absl::StatusOr<std::shared_ptr<Listener>> Start(EventLoops& loops,
                                                         const ListenAddress& address,
                                                         AcceptCallback on_accept);

  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The bound port (the real one when the address asked for port 0).
  uint16_t port() const { return port_; }
  // The bound IP address ("127.0.0.1", "::1").
  const std::string& host() const { return host_; }
  // "HOST:PORT" as bound.
  std::string address() const;

  // Closes the listening socket; no `on_accept` call starts after this returns (a socket
  // accepted meanwhile is closed). Idempotent; returns at once.
  void Stop();

  // Public for make_shared; use Start().
  Listener(EventLoops& loops, AcceptCallback on_accept);

 private:
  void Accept();

  EventLoops& loops_;
  AcceptCallback on_accept_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  std::string host_;
  uint16_t port_ = 0;
  uint64_t accepted_ = 0;  // on the listener's loop only
  std::atomic<bool> stopped_{false};
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_EVENT_LOOPS_H_
