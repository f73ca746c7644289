// Copyright tollgate authors. A real redis-server for one test.
#ifndef TOLLGATE_TESTS_SUPPORT_REDIS_SERVER_H_
#define TOLLGATE_TESTS_SUPPORT_REDIS_SERVER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/support/process.h"

namespace tollgate::testing {

// Runs `redis-server` on a free loopback port with persistence off (`--save "" --appendonly
// no`), in a temporary directory, logging to `<dir>/redis.log`. The destructor kills it.
class RedisServer {
 public:
  // Starts the server and waits until it answers PING. `extra_args` go to redis-server
  // after the defaults (e.g. {"--requirepass", "secret"}). When another process took the
  // free port (or the `--cluster-port` in `extra_args`) first, starts again on fresh ones.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      std::vector<std::string> extra_args = {});

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer();

  int port() const { return port_; }
  // redis://127.0.0.1:<port>
  std::string url() const;

  // SIGKILL, then reap: connections drop at once, state is lost (no persistence).
  void Kill();
  // SIGSTOP / SIGCONT: the server keeps its connections but stops answering.
  void Pause();
  void Resume();
  // Kills the server if it runs and starts a fresh one on the same port.
  absl::Status Restart();

 private:
  RedisServer(int port, std::vector<std::string> args, std::string dir)
      : port_(port), args_(std::move(args)), dir_(std::move(dir)) {}
  absl::Status Launch();

  int port_;
  std::vector<std::string> args_;
  std::string dir_;
  std::optional<Subprocess> process_;
};

// Sends PING to 127.0.0.1:`port` over a plain socket until it answers +PONG (or NOAUTH,
// which also means the server is up; OK) or `timeout_ms` passes (DeadlineExceeded). A
// `give_up` that returns true between tries ends the wait at once (Aborted).
absl::Status WaitForRedisPing(int port, int timeout_ms,
                              const std::function<bool()>& give_up = nullptr);

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_REDIS_SERVER_H_
