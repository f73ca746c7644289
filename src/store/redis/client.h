// Copyright tollgate authors. Pools of Redis connections on one I/O thread.
#ifndef TOLLGATE_SRC_STORE_REDIS_CLIENT_H_
#define TOLLGATE_SRC_STORE_REDIS_CLIENT_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/store/redis/connection.h"
#include "src/store/redis/durable_writes.h"
#include "src/store/redis/resp.h"

namespace tollgate::redis {

struct ClientOptions {
  ConnectionOptions connection;
  // Connections in the pool, used round-robin. REQUIRES: >= 1.
  int connections = 2;
  // Counts the durable writes of every pool (SendDurable). REQUIRES: non-null for
  // SendDurable.
  std::shared_ptr<DurableWaitMonitor> durable_monitor;
};

// `options.connections` RedisConnections to one node, on an io_context that someone else
// runs (and that outlives the pool). Thread-safe except where noted.
class ConnectionPool {
 public:
  // `with_ask_connection` adds one connection kept for SendAsking (Redis Cluster's ASK
  // redirects), never used by Send.
  ConnectionPool(boost::asio::io_context& io, const ClientOptions& options,
                 bool with_ask_connection = false);
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;
  // REQUIRES: Shutdown() has run and the io_context no longer runs (see RedisConnection).
  ~ConnectionPool();

  // Starts every connection's first attempt (they keep reconnecting in the background).
  void Start();
  // Blocks until every connection's first attempt has ended. Returns OK when all are
  // ready, else the first error. REQUIRES: Start() ran; not on the I/O thread.
  absl::Status AwaitStarted();

  // Sends on the next ready connection (round-robin); Unavailable at once if none is.
  // From a reply callback of one of this pool's connections (on the I/O thread), sends on
  // that connection if it is ready.
  void Send(std::string_view formatted_command, ReplyCallback done);
  // Sends ASKING and then `formatted_command` on the ask connection, with nothing between
  // them; `done` gets the command's reply. REQUIRES: on the I/O thread (the only thread
  // that uses the ask connection); built with `with_ask_connection`.
  void SendAsking(std::string_view formatted_command, ReplyCallback done);
  // Sends a write to be answered once a replica holds it, on the node's connection for
  // durable writes (DurableWrites, made and connected on first use).
  void SendDurable(std::string_view formatted_command, const DurableSend& how, ReplyCallback done);

  // Connections currently ready (the ask connection is not counted).
  int ReadyConnections() const;
  // host:port of the node.
  const std::string& address() const { return address_; }

  // Closes every connection for good and fails what is pending. REQUIRES: on the I/O
  // thread.
  void Shutdown();

 private:
  boost::asio::io_context& io_;
  const ClientOptions options_;
  const std::string address_;
  std::vector<std::unique_ptr<RedisConnection>> connections_;
  std::unique_ptr<RedisConnection> ask_connection_;
  std::atomic<uint64_t> next_{0};
  // Made by the first SendDurable; never replaced, so the pointer stays valid once read.
  std::atomic<DurableWrites*> durable_{nullptr};
  absl::Mutex durable_mu_;
  std::unique_ptr<DurableWrites> durable_owned_ ABSL_GUARDED_BY(durable_mu_);
  bool shut_down_ ABSL_GUARDED_BY(durable_mu_) = false;

  absl::Mutex mu_;
  int pending_starts_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// An io_context and the thread that runs it, for as long as this object lives.
class IoThread {
 public:
  IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;
  // Runs `before_stop` on the I/O thread (to shut connections down), then stops and joins.
  // REQUIRES: Stop() not yet called, not called from the I/O thread.
  void Stop(absl::AnyInvocable<void() &&> before_stop);
  ~IoThread();

  boost::asio::io_context& io() { return io_; }
  // Runs `task` soon on the I/O thread (destroyed unrun if it stops first).
  void Post(absl::AnyInvocable<void() &&> task);
  bool InThisThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

// A ConnectionPool to one Redis on an I/O thread of its own. Thread-safe; callbacks run on
// the client's I/O thread.
class RedisClient {
 public:
  // Connects every connection of the pool and waits until each is ready. On failure returns
  // the first connection's error (see RedisConnection::Start) and keeps nothing running.
  static absl::StatusOr<std::unique_ptr<RedisClient>> Connect(const ClientOptions& options);

  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;
  // Fails every pending command with Unavailable, then stops the I/O thread.
  // REQUIRES: not called from a callback (the I/O thread).
  ~RedisClient();

  // Sends a command on the next ready connection (round-robin). Unavailable if none is.
  void Send(std::string_view formatted_command, ReplyCallback done) {
    pool_->Send(formatted_command, std::move(done));
  }
  void Send(const std::vector<std::string>& args, ReplyCallback done) {
    Send(FormatCommand(args), std::move(done));
  }
  // ConnectionPool::SendDurable.
  void SendDurable(std::string_view formatted_command, const DurableSend& how, ReplyCallback done) {
    pool_->SendDurable(formatted_command, how, std::move(done));
  }

  // Blocking Send. REQUIRES: not called on the I/O thread.
  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args);

  // Connections currently ready.
  int ReadyConnections() const { return pool_->ReadyConnections(); }

  // Runs `task` soon on the client's I/O thread (destroyed unrun if the client stops first).
  void Post(absl::AnyInvocable<void() &&> task) { io_thread_.Post(std::move(task)); }
  // Whether the calling thread is the client's I/O thread.
  bool OnIoThread() const { return io_thread_.InThisThread(); }
  // The io_context its I/O thread runs.
  boost::asio::io_context& io() { return io_thread_.io(); }

 private:
  explicit RedisClient(const ClientOptions& options);

  IoThread io_thread_;
  std::unique_ptr<ConnectionPool> pool_;
};

// Blocking send of `args` through any `send(formatted, done)`. REQUIRES: not on the I/O
// thread that runs `done`.
template <typename SendFn>
absl::StatusOr<RedisReply> BlockingCommand(const std::vector<std::string>& args, SendFn&& send);

}  // namespace tollgate::redis

#include "src/store/redis/client_inl.h"  // IWYU pragma: export

#endif  // TOLLGATE_SRC_STORE_REDIS_CLIENT_H_
