// Copyright tollgate authors. SyncStore: decisions per second on one hot key, and the
// overshoot of 8 instances versus sync interval and load-balancer skew.
//
// Starts its own redis-server on a free loopback port (or uses TOLLGATE_REDIS_URL).
//   build/bench/sync_bench --benchmark_counters_tabular=true
//
// BM_SyncHotKey: one key, a limit too large to refuse, N = 1: the cost of a local decision
// (no Redis on the request path; rounds sync every 100 ms meanwhile).
//
// BM_SyncOvershoot: 8 SyncStore instances on one Redis, simulated time (so each point is
// exact and repeatable): a fixed or sliding window of 1,000 per second, 20,000 requests per
// second offered, instance 0 receiving `skew` percent of them (100: a key the load balancer
// pins to it) and the others an equal part of the rest, under `shares: equal` or `shares:
// demand`, each instance syncing every `interval` at its own phase, and each sync's
// reply arriving one round trip (1 ms) after the script ran, while traffic goes on. Counters
// per point, over 20 windows (5 under QUICK=1): `wrongly_allowed_pct`, the requests admitted beyond
// the limit as a percentage of all requests offered (the figure Cloudflare published for its
// sliding window), against `bound_pct`, the documented bound (round trip / interval); the worst
// excess over the limit at any moment, as a percentage of the limit; `used_pct`, the
// admitted share of the limit, what the customer actually gets (grants and first shares held
// back for instances that do not use them show up here, as under-admission). With
// TOLLGATE_BENCH_OUT=<dir> the points also go to <dir>/sync_overshoot.tsv, which
// bench/plots/sync_overshoot.sh plots.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_options.h"
#include "bench/bench_redis.h"
#include "benchmark/benchmark.h"
#include "src/store/sync/sync_store_testing.h"
#include "tollgate/clock.h"
#include "tollgate/sync_store.h"

namespace tollgate {
namespace {

// The benchmark's Redis: started once, killed at exit.
class BenchRedis {
 public:
  static BenchRedis& Get() {
    static BenchRedis* redis = new BenchRedis();
    return *redis;
  }
  const std::string& url() const { return url_; }

  // A store on connections of its own; `reply_timeout_ms` bounds a sync round.
  std::unique_ptr<SyncStore> NewStore(SyncStoreOptions options,
                                      const sync::SyncStoreTestOptions& test = {},
                                      int64_t reply_timeout_ms = 2000) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
          RedisConnections::Connect({.url = url_, .reply_timeout_ms = reply_timeout_ms});
      if (redis.ok()) {
        options.redis = *redis;
        absl::StatusOr<std::unique_ptr<SyncStore>> store = sync::CreateSyncStore(options, test);
        if (store.ok()) return *std::move(store);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::fprintf(stderr, "cannot reach Redis at %s\n", url_.c_str());
    std::abort();
  }

 private:
  BenchRedis() : url_(bench::BenchRedisUrl()) {}
  std::string url_;
};

Limit SyncLimit(std::string name, int64_t max, int64_t window_micros, int64_t interval_micros) {
  Limit limit;
  limit.name = std::move(name);
  limit.mode = Mode::kSync;
  limit.numbers.algorithm = Algorithm::kFixedWindow;
  limit.numbers.limit = max;
  limit.numbers.window_micros = window_micros;
  limit.sync_interval_micros = interval_micros;
  return limit;
}

void BM_SyncHotKey(benchmark::State& state) {
  static SyncStore* store = BenchRedis::Get().NewStore({}).release();
  static const Limit limit =
      SyncLimit("hot", 1'000'000'000'000'000, 3'600'000'000, /*interval_micros=*/100'000);
  int64_t allowed = 0;
  for (auto _ : state) {
    // ApplyAsync answers inline; the blocking Apply() would add a wait.
    store->ApplyAsync({CheckItem{&limit, "partner-42", 1}},
                      [&allowed](absl::StatusOr<std::vector<Decision>> d) {
                        allowed += d.ok() && (*d)[0].allowed;
                      });
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["allowed_pct"] = benchmark::Counter(
      100.0 * allowed / std::max<int64_t>(1, state.iterations()), benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) {
    state.counters["redis_commands"] = static_cast<double>(store->stats().redis_commands);
  }
}
BENCHMARK(BM_SyncHotKey)->Threads(1)->Threads(2)->UseRealTime();

// Where BM_SyncOvershoot writes its points: $TOLLGATE_BENCH_OUT/sync_overshoot.tsv when
// the variable is set (bench/plots/sync_overshoot.sh plots it). The first point of the
// process truncates the file and writes the header.
void WriteOvershootPoint(const std::string& line) {
  static std::FILE* out = []() -> std::FILE* {
    const char* dir = std::getenv("TOLLGATE_BENCH_OUT");
    if (dir == nullptr || *dir == '\0') return nullptr;
    const std::string path = absl::StrCat(dir, "/sync_overshoot.tsv");
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      std::perror(path.c_str());
      return nullptr;
    }
    std::fputs(
        "algorithm\tinterval_ms\tskew_pct\tround_trip_us\twrongly_allowed_pct\tbound_pct\t"
        "worst_excess_pct\tused_pct\tmean_admitted\tshares\n",
        file);
    return file;
  }();
  if (out == nullptr) return;
  std::fputs(line.c_str(), out);
  std::fflush(out);
}

// Args: sync interval in ms, percent of the load sent to instance 0, algorithm (0: fixed
// window, 1: sliding window), round trip of a sync in µs, shares (0: equal, 1: demand).
//
// Each sync's round trip is modeled in simulated time: once the script has run, the reply
// is held back for `round trip` while every instance keeps receiving its traffic (the
// syncing one decides on its old grant); then the reply is applied. So the one source of
// overshoot that grants leave (docs/sync.md: what an instance admits while its own sync is
// in flight beyond the grant that sync brings back) is in the measurement, with its bound:
// per sync at most rate x round trip, so at most round trip / interval of all requests.
//
// Simulated time runs 100 times slower than the scenario it models (a 100 s window, 200
// requests a second, syncs every 1 to 100 s, a 100 ms round trip): the same counts and the
// same ratios, so the same decisions, but Redis expires the counters on its own real clock,
// and a 1 s window's keys (about 2 s of TTL) could expire before a slow run is done with
// them. Everything reported is in the modeled scenario's units.
void BM_SyncOvershoot(benchmark::State& state) {
  constexpr int kInstances = 8;
  constexpr int64_t kScale = 100;
  constexpr int64_t kLimit = 1000;
  constexpr int64_t kWindow = 1'000'000 * kScale;
  constexpr double kOfferedPerSecond = 20'000.0 / kScale;
  // Windows modeled per point: 20, or 5 under QUICK=1 (bench/bench_options.h).
  const int windows = bench::Quick() ? 5 : 20;
  constexpr int64_t kStepMicros = 100 * kScale;
  constexpr int64_t kStepsPerWindow = kWindow / kStepMicros;
  const int64_t interval = state.range(0) * 1000 * kScale;
  const double skew = state.range(1) / 100.0;
  const bool sliding = state.range(2) == 1;
  const int64_t round_trip = state.range(3) * kScale;
  const Shares shares = state.range(4) == 1 ? Shares::kDemand : Shares::kEqual;
  static int run = 0;
  Limit limit = SyncLimit(absl::StrCat("overshoot", ++run), kLimit, kWindow, interval);
  if (sliding) limit.numbers.algorithm = Algorithm::kSlidingWindow;
  limit.shares = shares;

  for (auto _ : state) {
    SimulatedClock clock(1'700'000'000LL * 1'000'000);            // a window start
    std::vector<int64_t> per_step(windows * kStepsPerWindow, 0);  // admitted per step
    std::vector<double> owed(kInstances, 0);
    std::vector<std::unique_ptr<SyncStore>> stores;
    int64_t t = 0;  // simulated µs since the start
    bool running = true;
    // Every instance receives its share of the traffic for `micros`, step by step.
    auto run_for = [&](int64_t micros) {
      for (int64_t done = 0; done < micros && running; done += kStepMicros) {
        const int64_t step = t / kStepMicros;
        for (int i = 0; i < kInstances; ++i) {
          const double share = i == 0 ? skew : (1 - skew) / (kInstances - 1);
          owed[i] += share * kOfferedPerSecond * kStepMicros / 1e6;
          for (; owed[i] >= 1; owed[i] -= 1) {
            absl::StatusOr<std::vector<Decision>> d = stores[i]->Apply({{&limit, "hot", 1}});
            if (d.ok() && (*d)[0].allowed && step < static_cast<int64_t>(per_step.size())) {
              ++per_step[step];
            }
          }
        }
        clock.AdvanceMicros(kStepMicros);
        t += kStepMicros;
      }
    };
    std::vector<int64_t> next_sync;
    for (int i = 0; i < kInstances; ++i) {
      SyncStoreOptions options;
      options.clock = &clock;
      options.instance_count = [] { return kInstances; };
      sync::SyncStoreTestOptions test;
      test.use_redis_time = false;
      test.schedule_rounds = false;
      if (round_trip > 0) test.before_reply_applied = [&] { run_for(round_trip); };
      // Simulated time: a slow reply on a loaded machine must not fail a sync (the modeled
      // round trip is the hook's).
      stores.push_back(BenchRedis::Get().NewStore(options, test, /*reply_timeout_ms=*/60'000));
      // Each instance syncs at its own phase within the interval.
      next_sync.push_back(interval * (i + 1) / kInstances);
    }
    while (t < windows * kWindow) {
      for (int i = 0; i < kInstances; ++i) {
        if (t >= next_sync[i]) {
          next_sync[i] += interval;
          (void)stores[i]->SyncNow();  // may move time on by the round trip
        }
      }
      run_for(kStepMicros);
    }
    running = false;  // the stores' last syncs (destructors) admit nothing more

    // Wrongly allowed: what pushed the exact estimate (previous * weight + current for a
    // sliding window, current for a fixed one) above the limit, at the time it was admitted.
    double wrong = 0, worst_excess = 0;
    int64_t worst_step = 0;  // where the worst excess was, in steps since the start
    int64_t total = 0, previous = 0;
    for (int w = 0; w < windows; ++w) {
      int64_t current = 0;
      for (int64_t k = 0; k < kStepsPerWindow; ++k) {
        const int64_t admitted = per_step[w * kStepsPerWindow + k];
        const double weight =
            sliding ? static_cast<double>(kStepsPerWindow - k) / kStepsPerWindow : 0;
        const double before = static_cast<double>(previous) * weight + static_cast<double>(current);
        const double after = before + static_cast<double>(admitted);
        wrong += std::max(0.0, after - std::max<double>(kLimit, before));
        if (after - kLimit > worst_excess) {
          worst_excess = after - kLimit;
          worst_step = w * kStepsPerWindow + k;
        }
        current += admitted;
      }
      total += current;
      previous = current;
    }
    int64_t failures = 0;
    for (const auto& store : stores) failures += store->stats().sync_failures;
    state.counters["sync_failures"] = static_cast<double>(failures);
    const double offered = kOfferedPerSecond * kWindow / 1e6 * windows;
    const double wrong_pct = 100.0 * wrong / offered;
    const double bound_pct =
        100.0 * static_cast<double>(round_trip) / static_cast<double>(interval);
    const double worst_pct = 100.0 * std::max(0.0, worst_excess) / kLimit;
    const double used_pct = 100.0 * total / (static_cast<double>(kLimit) * windows);
    const double mean = static_cast<double>(total) / windows;
    state.counters["mean_admitted"] = mean;
    state.counters["worst_excess_pct"] = worst_pct;
    state.counters["wrongly_allowed_pct"] = wrong_pct;
    state.counters["worst_at_ms"] = static_cast<double>(worst_step * kStepMicros) / 1000.0 / kScale;
    state.counters["bound_pct"] = bound_pct;
    state.counters["used_pct"] = used_pct;
    char line[256];
    std::snprintf(line, sizeof(line), "%s\t%lld\t%lld\t%lld\t%.6f\t%.4f\t%.3f\t%.2f\t%.1f\t%s\n",
                  sliding ? "sliding_window" : "fixed_window",
                  static_cast<long long>(state.range(0)), static_cast<long long>(state.range(1)),
                  static_cast<long long>(state.range(3)), wrong_pct, bound_pct, worst_pct, used_pct,
                  mean, std::string(SharesName(shares)).c_str());
    WriteOvershootPoint(line);
    stores.clear();  // while run_for, which their hooks call, still exists
  }
}
BENCHMARK(BM_SyncOvershoot)
    ->ArgNames({"interval_ms", "skew_pct", "sliding", "round_trip_us", "demand"})
    ->ArgsProduct({{10, 100, 1000}, {12, 50, 90, 100}, {0, 1}, {1000}, {0, 1}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tollgate
