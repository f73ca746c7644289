// Copyright tollgate authors. Check latency while Redis is healthy, black-holed and back.
//
// Starts its own redis-server on a free loopback port and the tests' TCP proxy
// (tests/support/fault_proxy.h) in this process, which can black-hole the connection (nothing
// forwarded either way, connections kept open: a partition). One caller thread checks a fail_open
// token bucket (deadline 10 ms) through a ResilientStore over a RedisStore, in phases:
//   healthy         Redis answers (through the proxy, and direct for reference);
//   black-hole      the proxy holds everything; the breaker never opens (threshold set out
//                   of reach), so every check waits its deadline and the policy answers;
//   breaker open    the proxy holds everything; the breaker (threshold 5) is open, so
//                   checks are answered locally without waiting (a probe every 500 ms);
//   recovery        the black hole lifted: checks from then until 1000 have been answered
//                   by Redis again (200 µs apart, at most 10 s), and the time to the first
//                   of those.
// Prints p50/p99/max per phase. Goals (issue 4): black-hole p99 <= deadline + 1 ms;
// breaker open p99 <= 50 µs.
//
//   build/bench/resilience_bench
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fault_proxy.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

constexpr int64_t kDeadlineMicros = 10'000;

int64_t MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int ListenLoopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

int FreeLoopbackPort() {
  int port = 0;
  int fd = ListenLoopback(&port);
  close(fd);
  return port;
}

struct RedisProcess {
  pid_t pid = -1;
  int port = 0;
  ~RedisProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

std::unique_ptr<ResilientStore> MakeStore(int port, int failure_threshold) {
  RedisConnectionsOptions connection;
  connection.url = "redis://127.0.0.1:" + std::to_string(port);
  connection.connections = 1;
  // Longer than any phase: a black-holed connection keeps waiting instead of being dropped
  // and failing fast, so "black-hole" measures deadlines, not connection refusals.
  connection.reply_timeout_ms = 600'000;
  absl::StatusOr<std::unique_ptr<RedisStore>> redis;
  for (int attempt = 0; attempt < 200; ++attempt) {
    absl::StatusOr<std::shared_ptr<RedisConnections>> connections =
        RedisConnections::Connect(connection);
    redis = connections.ok() ? RedisStore::Create({.redis = *connections})
                             : absl::StatusOr<std::unique_ptr<RedisStore>>(connections.status());
    if (redis.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!redis.ok()) {
    std::fprintf(stderr, "cannot reach redis-server: %s\n", redis.status().ToString().c_str());
    return nullptr;
  }
  ResilienceOptions options;
  options.breaker = {.failure_threshold = failure_threshold, .open_duration_ms = 500};
  auto store = ResilientStore::Create(std::shared_ptr<Store>(std::move(*redis)), options);
  return store.ok() ? std::move(*store) : nullptr;
}

struct Sample {
  int64_t micros;
  DecisionSource source;
};

Sample CheckOnce(Store& store, const Limit& limit, int i) {
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, "user:" + std::to_string(i % 1000), 1});
  const int64_t start = MonotonicMicros();
  absl::StatusOr<std::vector<Decision>> decisions = store.Apply(std::move(items));
  const int64_t took = MonotonicMicros() - start;
  if (!decisions.ok()) {
    std::fprintf(stderr, "check failed: %s\n", decisions.status().ToString().c_str());
    std::exit(1);
  }
  return {took, (*decisions)[0].source};
}

void PrintRow(const char* phase, std::vector<int64_t> micros, const char* note) {
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) {
    return micros[std::min(micros.size() - 1, static_cast<size_t>(q * micros.size()))];
  };
  std::printf("| %-26s | %6zu | %9lld | %9lld | %9lld | %s\n", phase, micros.size(),
              static_cast<long long>(at(0.50)), static_cast<long long>(at(0.99)),
              static_cast<long long>(micros.back()), note);
}

int Run() {
  RedisProcess redis;
  redis.port = FreeLoopbackPort();
  redis.pid = fork();
  if (redis.pid == 0) {
    freopen("/dev/null", "w", stdout);
    const std::string port_text = std::to_string(redis.port);
    execlp("redis-server", "redis-server", "--port", port_text.c_str(), "--bind", "127.0.0.1",
           "--save", "", "--appendonly", "no", "--dir", "/tmp", "--loglevel", "warning",
           static_cast<char*>(nullptr));
    _exit(127);
  }
  testing::FaultProxy proxy(redis.port);

  Limit limit;
  limit.name = "api";
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = 1'000'000'000;
  limit.numbers.refill_per_second = 1e9;
  limit.on_store_failure = FailureMode::kFailOpen;
  limit.timeout_micros = kDeadlineMicros;

  std::unique_ptr<ResilientStore> direct = MakeStore(redis.port, 5);
  std::unique_ptr<ResilientStore> never_opens = MakeStore(proxy.port(), 1'000'000'000);
  std::unique_ptr<ResilientStore> store = MakeStore(proxy.port(), 5);
  if (direct == nullptr || never_opens == nullptr || store == nullptr) return 1;

  std::printf("deadline %lld us, breaker threshold 5, open 500 ms, 1 caller thread\n\n",
              static_cast<long long>(kDeadlineMicros));
  std::printf("| %-26s | %6s | %9s | %9s | %9s | %s\n", "phase", "checks", "p50 us", "p99 us",
              "max us", "note");
  std::printf("|%s|%s|%s|%s|%s|%s\n", std::string(28, '-').c_str(), std::string(8, '-').c_str(),
              std::string(11, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str(), "------");

  auto measure = [&](Store& s, int n, DecisionSource* source) {
    std::vector<int64_t> micros;
    micros.reserve(n);
    for (int i = 0; i < 200; ++i) CheckOnce(s, limit, i);  // warm-up
    for (int i = 0; i < n; ++i) {
      Sample sample = CheckOnce(s, limit, i);
      micros.push_back(sample.micros);
      *source = sample.source;
    }
    return micros;
  };
  DecisionSource source;
  PrintRow("healthy, direct", measure(*direct, 5000, &source), "source redis");
  PrintRow("healthy, via proxy", measure(*store, 5000, &source), "source redis");
  measure(*never_opens, 10, &source);

  proxy.set_fault(testing::FaultProxy::Fault::kBlackHole);
  {
    std::vector<int64_t> micros;
    for (int i = 0; i < 500; ++i) micros.push_back(CheckOnce(*never_opens, limit, i).micros);
    PrintRow("black-hole, breaker closed", micros, "each waits the deadline; fallback");
  }
  {
    // The first checks open the breaker (5 deadlines); measured from then on.
    for (int i = 0; i < 5; ++i) CheckOnce(*store, limit, i);
    std::vector<int64_t> micros;
    for (int i = 0; i < 5000; ++i) micros.push_back(CheckOnce(*store, limit, i).micros);
    PrintRow("black-hole, breaker open", micros,
             store->circuit_state() == CircuitState::kClosed ? "breaker closed?!"
                                                             : "answered locally; fallback");
  }

  proxy.set_fault(testing::FaultProxy::Fault::kPass);
  {
    const int64_t lifted = MonotonicMicros();
    int64_t first_redis = -1;
    int redis_answers = 0;
    std::vector<int64_t> micros;
    while (redis_answers < 1000 && MonotonicMicros() - lifted < 10'000'000) {
      Sample sample = CheckOnce(*store, limit, static_cast<int>(micros.size()));
      micros.push_back(sample.micros);
      if (sample.source == DecisionSource::kRedis) {
        if (first_redis < 0) first_redis = MonotonicMicros() - lifted;
        ++redis_answers;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    char note[160];
    std::snprintf(note, sizeof(note),
                  "first Redis answer %.1f ms after the lift; %d answered by Redis in %.1f s",
                  first_redis / 1000.0, redis_answers, (MonotonicMicros() - lifted) / 1e6);
    PrintRow("recovery", micros, note);
  }
  const ResilienceStats stats = store->stats();
  std::printf(
      "\nbreaker store: %lld store decisions, %lld fallback, %lld deadlines missed, "
      "%lld breaker rejections, %lld late replies\n",
      static_cast<long long>(stats.store_decisions),
      static_cast<long long>(stats.fallback_decisions),
      static_cast<long long>(stats.deadlines_missed),
      static_cast<long long>(stats.breaker_rejections), static_cast<long long>(stats.late_replies));
  store.reset();
  never_opens.reset();
  direct.reset();
  return 0;
}

}  // namespace
}  // namespace tollgate

int main() { return tollgate::Run(); }
