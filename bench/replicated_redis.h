// Copyright tollgate authors. A primary, its replica and (optionally) a Sentinel as processes of
// a benchmark: bench/durable_bench.cc and bench/failover_loss_bench.cc.
#ifndef TOLLGATE_BENCH_REPLICATED_REDIS_H_
#define TOLLGATE_BENCH_REPLICATED_REDIS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_redis.h"

namespace tollgate::bench {

// A redis-server (or sentinel) started with `args` after the binary, killed (SIGKILL) when
// destroyed unless already killed.
class RedisProcess {
 public:
  RedisProcess(int port, const std::vector<std::string>& args) : port_(port) {
    std::fflush(nullptr);  // else the child's freopen writes the parent's buffered output
    pid_ = fork();
    if (pid_ == 0) {
      if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
      std::vector<char*> argv;
      std::vector<std::string> all = {"redis-server"};
      all.insert(all.end(), args.begin(), args.end());
      for (std::string& arg : all) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
  }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;
  ~RedisProcess() { Kill(); }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

// `redis-cli -p PORT ARGS...`'s output, "" when it fails.
inline std::string RedisCli(int port, const std::vector<std::string>& args) {
  std::string command = absl::StrCat("redis-cli -p ", port);
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StrAppend(&command, " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, read);
  pclose(pipe);
  return out;
}

// Waits (bounded) for `condition`; false if it never held.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

// A field of an INFO section ("connected_slaves"), or "".
inline std::string InfoField(int port, const std::string& section, const std::string& field) {
  for (absl::string_view line : absl::StrSplit(RedisCli(port, {"INFO", section}), '\n')) {
    line = absl::StripSuffix(line, "\r");
    if (absl::ConsumePrefix(&line, field + ":")) return std::string(line);
  }
  return "";
}

// How many times Redis on `port` ran `command` (INFO commandstats), 0 when never.
inline int64_t CommandCalls(int port, const std::string& command) {
  const std::string stats = InfoField(port, "commandstats", "cmdstat_" + command);
  // calls=12,usec=...
  int64_t calls = 0;
  for (absl::string_view part : absl::StrSplit(stats, ',')) {
    if (absl::ConsumePrefix(&part, "calls=")) (void)absl::SimpleAtoi(part, &calls);
  }
  return calls;
}

// The common arguments of a benchmark's redis-server on `port`: no persistence, loopback.
inline std::vector<std::string> ServerArgs(int port) {
  return {"--port",       std::to_string(port),
          "--bind",       "127.0.0.1",
          "--save",       "",
          "--appendonly", "no",
          "--dir",        "/tmp",
          "--loglevel",   "warning"};
}

// Starts redis-server on a free port with `extra` arguments and waits for its PING.
inline std::unique_ptr<RedisProcess> StartRedis(const std::vector<std::string>& extra = {}) {
  const int port = FreeLoopbackPort();
  std::vector<std::string> args = ServerArgs(port);
  args.insert(args.end(), extra.begin(), extra.end());
  auto process = std::make_unique<RedisProcess>(port, args);
  if (!WaitFor([&] { return RedisCli(port, {"PING"}).starts_with("PONG"); },
               std::chrono::seconds(10))) {
    std::fprintf(stderr, "redis-server on %d did not start\n", port);
    std::exit(1);
  }
  return process;
}

// Waits until the primary on `port` has `replicas` online replicas.
inline bool WaitReplicas(int port, int replicas) {
  return WaitFor(
      [&] {
        return InfoField(port, "replication", "connected_slaves") == std::to_string(replicas) &&
               (replicas == 0 ||
                absl::StrContains(RedisCli(port, {"INFO", "replication"}), "state=online"));
      },
      std::chrono::seconds(30));
}

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_REPLICATED_REDIS_H_
