// Copyright tollgate authors.
#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tollgate::testing {
namespace {

// One PING over a fresh socket; true when the server answered like a live Redis.
bool PingOnce(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval timeout{0, 200'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    constexpr char kPing[] = "PING\r\n";
    char buffer[64] = {};
    if (write(fd, kPing, sizeof(kPing) - 1) == sizeof(kPing) - 1) {
      ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
      std::string_view reply(buffer, n > 0 ? static_cast<size_t>(n) : 0);
      ok = reply.starts_with("+PONG") || reply.starts_with("-NOAUTH");
    }
  }
  close(fd);
  return ok;
}

// Whether redis-server's log at `path` says it could not bind a port: another process took
// the free port between FreePort() and the server's bind.
bool LogSaysPortInUse(const std::string& path) {
  std::ifstream log(path);
  std::stringstream text;
  text << log.rdbuf();
  return absl::StrContains(text.str(), "Address already in use");
}

}  // namespace

absl::Status WaitForRedisPing(int port, int timeout_ms, const std::function<bool()>& give_up) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (PingOnce(port)) return absl::OkStatus();
    if (give_up && give_up()) {
      return absl::AbortedError(absl::StrCat("gave up waiting for PING on port ", port));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("no Redis answers PING on port ", port));
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    std::vector<std::string> extra_args) {
  // A free port may be taken by another process (a client's ephemeral port, another test's
  // server) before redis-server binds it: then try again on fresh ports, the cluster bus
  // port among them.
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<RedisServer> server(
        new RedisServer(FreePort(), extra_args, MakeTempDir("tollgate-redis")));
    absl::Status status = server->Launch();
    if (status.ok()) return server;
    if (!absl::IsAlreadyExists(status) || attempt == kAttempts) return status;
    for (size_t i = 0; i + 1 < extra_args.size(); ++i) {
      if (extra_args[i] == "--cluster-port") extra_args[i + 1] = absl::StrCat(FreePort());
    }
  }
}

RedisServer::~RedisServer() { Kill(); }

std::string RedisServer::url() const { return absl::StrCat("redis://127.0.0.1:", port_); }

absl::Status RedisServer::Launch() {
  std::vector<std::string> argv = {"redis-server",
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   dir_};
  argv.insert(argv.end(), args_.begin(), args_.end());
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, dir_ + "/redis.log");
  if (!process.ok()) return process.status();
  process_.emplace(*std::move(process));
  const std::string log = dir_ + "/redis.log";
  absl::Status status = WaitForRedisPing(port_, 10'000, [&log] { return LogSaysPortInUse(log); });
  if (absl::IsAborted(status)) {
    Kill();
    return absl::AlreadyExistsError(
        absl::StrCat("a port of redis-server on ", port_, " is in use (see ", log, ")"));
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(status.message(), " (see ", log, ")"));
  }
  return absl::OkStatus();
}

void RedisServer::Kill() {
  if (process_.has_value()) {
    process_->Signal(SIGKILL);
    process_->Wait();
    process_.reset();
  }
}

void RedisServer::Pause() {
  if (process_.has_value()) process_->Signal(SIGSTOP);
}

void RedisServer::Resume() {
  if (process_.has_value()) process_->Signal(SIGCONT);
}

absl::Status RedisServer::Restart() {
  Kill();
  return Launch();
}

}  // namespace tollgate::testing
