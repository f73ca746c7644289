// Copyright tollgate authors. A small pool of Redis connections on one I/O thread.
#ifndef TOLLGATE_SRC_STORE_REDIS_CLIENT_H_
#define TOLLGATE_SRC_STORE_REDIS_CLIENT_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "src/store/redis/connection.h"
#include "src/store/redis/resp.h"

namespace tollgate::redis {

struct ClientOptions {
  ConnectionOptions connection;
  // Connections in the pool, used round-robin. REQUIRES: >= 1.
  int connections = 2;
};

// Owns an io_context, the thread that runs it, and `connections` RedisConnections.
// Thread-safe; callbacks run on the client's I/O thread.
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
  void Send(std::string formatted_command, ReplyCallback done);
  void Send(const std::vector<std::string>& args, ReplyCallback done) {
    Send(FormatCommand(args), std::move(done));
  }

  // Blocking Send. REQUIRES: not called on the I/O thread.
  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args);

  // Connections currently ready.
  int ReadyConnections() const;

 private:
  explicit RedisClient(const ClientOptions& options);

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::unique_ptr<RedisConnection>> connections_;
  std::atomic<uint64_t> next_{0};
  std::thread thread_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CLIENT_H_
