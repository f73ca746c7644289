// Copyright tollgate authors. Decisions per second on a Redis Cluster of 1, 2 and 3
// primaries (no replicas), all on this machine, through one RedisStore.
//
// Each benchmark starts its own cluster (redis-server --cluster-enabled yes, slots assigned
// with CLUSTER ADDSLOTSRANGE, nodes joined with CLUSTER MEET), then keeps `kInFlight` single-limit
// checks on random keys in flight. The result is the ratio between the runs of one invocation
// (`vs_1_primary`), not the absolute figure: every process shares the same cores.
//
//   build/bench/cluster_bench
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/bench_redis.h"
#include "benchmark/benchmark.h"
#include "tollgate/redis_store.h"

namespace tollgate::bench {
namespace {

constexpr int kInFlight = 256;
constexpr int kKeys = 100'000;

// A cluster of `primaries` nodes; killed by the destructor.
class BenchCluster {
 public:
  explicit BenchCluster(int primaries) {
    for (int i = 0; i < primaries; ++i) {
      const int port = FreeLoopbackPort();
      const std::string dir = "/tmp/tollgate-cluster-bench-" + std::to_string(port);
      // A fresh directory: a nodes.conf left by an earlier run would bring back its slots.
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
      std::filesystem::create_directories(dir, ignored);
      const int bus_port = FreeLoopbackPort();
      const pid_t pid = fork();
      if (pid == 0) {
        if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
        const std::string port_text = std::to_string(port);
        // The bus port defaults to port + 10000, out of range for a high free port.
        const std::string bus_port_text = std::to_string(bus_port);
        execlp("redis-server", "redis-server", "--port", port_text.c_str(), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", dir.c_str(), "--cluster-enabled", "yes",
               "--cluster-config-file", "nodes.conf", "--cluster-port", bus_port_text.c_str(),
               "--loglevel", "warning", static_cast<char*>(nullptr));
        _exit(127);
      }
      pids_.push_back(pid);
      ports_.push_back(port);
      bus_ports_.push_back(bus_port);
    }
    for (int port : ports_) WaitFor("redis-cli -p " + std::to_string(port) + " ping", "PONG");
    // Slots by hand: `redis-cli --cluster create` refuses fewer than 3 primaries.
    constexpr int kSlots = 16384;
    for (int i = 0; i < primaries; ++i) {
      const int first = kSlots * i / primaries;
      const int last = kSlots * (i + 1) / primaries - 1;
      Run("redis-cli -p " + std::to_string(ports_[i]) + " cluster addslotsrange " +
          std::to_string(first) + " " + std::to_string(last));
      if (i > 0) {
        Run("redis-cli -p " + std::to_string(ports_[i]) + " cluster meet 127.0.0.1 " +
            std::to_string(ports_[0]) + " " + std::to_string(bus_ports_[0]));
      }
    }
    for (int port : ports_) {
      WaitFor("redis-cli -p " + std::to_string(port) + " cluster info", "cluster_state:ok");
    }
  }
  ~BenchCluster() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  std::string url() const { return "redis-cluster://127.0.0.1:" + std::to_string(ports_[0]); }

 private:
  static void WaitFor(const std::string& command, const std::string& expected) {
    for (int attempt = 0; attempt < 600; ++attempt) {
      std::string output;
      if (FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r")) {
        char buffer[4096];
        while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
        pclose(pipe);
      }
      if (output.find(expected) != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::fprintf(stderr, "timed out waiting for `%s`\n", command.c_str());
    std::abort();
  }
  static void Run(const std::string& command) {
    if (std::system((command + " > /dev/null 2>&1").c_str()) != 0) {
      std::fprintf(stderr, "failed: %s\n", command.c_str());
      std::abort();
    }
  }
  std::vector<pid_t> pids_;
  std::vector<int> ports_;
  std::vector<int> bus_ports_;
};

double one_primary_rate = 0;

void BM_ClusterCheck(benchmark::State& state) {
  const int primaries = static_cast<int>(state.range(0));
  BenchCluster cluster(primaries);
  absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
      RedisConnections::Connect({.url = cluster.url()});
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      redis.ok() ? RedisStore::Create({.redis = *redis})
                 : absl::StatusOr<std::unique_ptr<RedisStore>>(redis.status());
  if (!store.ok()) {
    state.SkipWithError(std::string(store.status().message()).c_str());
    return;
  }
  Limit limit;
  limit.name = "bench";
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = 1'000'000;
  limit.numbers.refill_per_second = 1'000'000;

  std::mt19937 random(42);
  absl::Mutex mu;
  int in_flight = 0;
  int64_t errors = 0;
  const auto started = std::chrono::steady_clock::now();
  int64_t decisions = 0;
  for (auto _ : state) {
    // One iteration: kInFlight checks sent without waiting, then wait for all of them.
    {
      absl::MutexLock lock(&mu);
      in_flight = kInFlight;
    }
    for (int i = 0; i < kInFlight; ++i) {
      (*store)->ApplyAsync({{&limit, "user:" + std::to_string(random() % kKeys)}},
                           [&](const absl::StatusOr<std::vector<Decision>>& decision) {
                             absl::MutexLock lock(&mu);
                             if (!decision.ok()) ++errors;
                             --in_flight;
                           });
    }
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &in_flight));
    decisions += kInFlight;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double rate = decisions / seconds;
  if (primaries == 1) one_primary_rate = rate;
  state.SetItemsProcessed(decisions);
  state.counters["decisions_per_s"] = rate;
  state.counters["errors"] = static_cast<double>(errors);
  if (one_primary_rate > 0) state.counters["vs_1_primary"] = rate / one_primary_rate;
}

BENCHMARK(BM_ClusterCheck)
    ->ArgName("primaries")
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Iterations(300)  // one run per cluster size: each run starts its own cluster
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tollgate::bench

BENCHMARK_MAIN();
