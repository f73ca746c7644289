// Copyright tollgate authors. Decisions per second from RedisStore against one local Redis.
//
// Starts its own redis-server on a free loopback port (or uses TOLLGATE_REDIS_URL). Each
// benchmark keeps `in_flight` checks outstanding from one thread (1, 8, 64 concurrent
// callers), spread over 1000 keys, all allowed (the limits are huge), so the figure is what
// the client and Redis sustain, not how fast callers get refused.
//
//   build/bench/redis_bench --benchmark_counters_tabular=true
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_options.h"
#include "bench/bench_redis.h"
#include "benchmark/benchmark.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

// The benchmark's Redis: started once, killed at exit.
class BenchRedis {
 public:
  // Destroyed at exit, which stops the redis-server it started.
  static BenchRedis& Get() {
    static BenchRedis redis;
    return redis;
  }
  RedisStore& store() { return *store_; }
  ~BenchRedis() { store_.reset(); }

 private:
  BenchRedis() {
    const std::string& url = bench::BenchRedisUrl();
    for (int attempt = 0; attempt < 200 && store_ == nullptr; ++attempt) {
      absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
          RedisConnections::Connect({.url = url});
      absl::StatusOr<std::unique_ptr<RedisStore>> store =
          redis.ok() ? RedisStore::Create({.redis = *redis})
                     : absl::StatusOr<std::unique_ptr<RedisStore>>(redis.status());
      if (store.ok()) {
        store_ = *std::move(store);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (store_ == nullptr) {
      std::fprintf(stderr, "cannot reach Redis at %s\n", url.c_str());
      std::abort();
    }
  }
  std::unique_ptr<RedisStore> store_;
};

Limit HugeLimit(Algorithm algorithm) {
  Limit limit;
  limit.name = "bench";
  limit.numbers.algorithm = algorithm;
  limit.numbers.capacity = 1'000'000'000;
  limit.numbers.refill_per_second = 1e9;
  limit.numbers.limit = 1'000'000'000;
  limit.numbers.window_micros = 60'000'000;
  return limit;
}

void BM_RedisCheck(benchmark::State& state, Algorithm algorithm) {
  RedisStore& store = BenchRedis::Get().store();
  const Limit limit = HugeLimit(algorithm);
  const int64_t in_flight = state.range(0);
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("user:" + std::to_string(i));

  std::mutex mu;
  std::condition_variable cv;
  int64_t outstanding = 0;
  std::atomic<int64_t> errors{0};
  size_t next_key = 0;
  for (auto _ : state) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return outstanding < in_flight; });
      ++outstanding;
    }
    store.ApplyAsync({{&limit, keys[next_key++ % keys.size()]}},
                     [&](absl::StatusOr<std::vector<Decision>> decisions) {
                       if (!decisions.ok() || !(*decisions)[0].allowed) ++errors;
                       std::lock_guard<std::mutex> lock(mu);
                       --outstanding;
                       cv.notify_one();
                     });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return outstanding == 0; });
  state.SetItemsProcessed(state.iterations());
  state.counters["errors"] = static_cast<double>(errors.load());
}

BENCHMARK_CAPTURE(BM_RedisCheck, token_bucket, Algorithm::kTokenBucket)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));
BENCHMARK_CAPTURE(BM_RedisCheck, fixed_window, Algorithm::kFixedWindow)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));
BENCHMARK_CAPTURE(BM_RedisCheck, sliding_window, Algorithm::kSlidingWindow)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));

}  // namespace
}  // namespace tollgate

BENCHMARK_MAIN();
