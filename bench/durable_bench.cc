// Copyright tollgate authors. What durable limits cost (docs/redis.md, "Durable limits"):
// plain and durable checks in one run, on one primary with one replica, both started here on
// free loopback ports. Each row keeps `callers` checks outstanding through the library's
// RedisStore (no deadline layer), each caller issuing its next check from the previous one's
// answer, on 1000 keys of a limit no check exceeds (every check writes). A durable row's limit
// says durable: true with a timeout of 1 s, so that every check is confirmed and the row
// measures the WAITs, not the failure policy.
//
// Columns: decisions per second; p50 and p99 of a decision's latency; the primary's, the
// replica's and this process's CPU per decision (/proc/PID/stat); WAITs per decision (INFO
// commandstats): decisions per WAIT is the group a WAIT covers; a WAIT's mean time from sent
// to answered (sent with its group, so it includes the group's script call). Goals (issue 45): at
// most one WAIT per flush (a group is one flush of the durable connection, so WAITs per decision <=
// 1); durable at least 0.5x the plain rows' decisions per second at 64 callers.
//
//   build/bench/durable_bench          (TOLLGATE_BENCH_QUICK=1: 0.5 s per row)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_options.h"
#include "bench/process_cpu.h"
#include "bench/replicated_redis.h"
#include "tollgate/redis_store.h"

namespace tollgate::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Row {
  double per_second = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us_per_decision = 0;          // the primary's
  double replica_cpu_us_per_decision = 0;  // the replica's
  double client_cpu_us_per_decision = 0;   // this process's
  double waits_per_decision = 0;
  double wait_mean_us = 0;  // a WAIT's mean time, sent to answered (the store's histogram)
  int64_t errors = 0;
};

// `callers` closed-loop chains of checks of `limit` for `seconds`.
class Run {
 public:
  Run(RedisStore& store, const Limit& limit, int callers, double seconds)
      : store_(store), limit_(limit), callers_(callers), seconds_(seconds) {}

  // Decisions made (and their latencies in `latencies`), once every chain has stopped.
  int64_t Go(std::vector<int64_t>* latencies) {
    chains_.resize(callers_);
    stop_at_ = SteadyClock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds_ * 1e6));
    running_.store(callers_);
    for (int caller = 0; caller < callers_; ++caller) Next(caller);
    done_.WaitForNotification();
    int64_t decisions = 0;
    for (Chain& chain : chains_) {
      decisions += static_cast<int64_t>(chain.latencies.size());
      latencies->insert(latencies->end(), chain.latencies.begin(), chain.latencies.end());
    }
    return decisions;
  }
  int64_t errors() const { return errors_.load(); }

 private:
  struct Chain {
    std::vector<int64_t> latencies;
    int64_t next_key = 0;
  };

  void Next(int caller) {
    Chain& chain = chains_[caller];
    const SteadyClock::time_point sent = SteadyClock::now();
    if (sent >= stop_at_) {
      if (running_.fetch_sub(1) == 1) done_.Notify();
      return;
    }
    const std::string key = "user:" + std::to_string(caller * 1000 + chain.next_key++ % 1000);
    store_.ApplyAsync({{&limit_, key}}, [this, caller, sent](
                                            const absl::StatusOr<std::vector<Decision>>& answer) {
      if (!answer.ok() || !(*answer)[0].allowed) ++errors_;
      chains_[caller].latencies.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - sent).count());
      Next(caller);
    });
  }

  RedisStore& store_;
  const Limit& limit_;
  const int callers_;
  const double seconds_;
  std::vector<Chain> chains_;
  SteadyClock::time_point stop_at_;
  std::atomic<int> running_{0};
  std::atomic<int64_t> errors_{0};
  absl::Notification done_;
};

Row Measure(RedisStore& store, const Limit& limit, int callers, double seconds,
            const RedisProcess& primary, const RedisProcess& replica) {
  {
    std::vector<int64_t> warmup;
    Run(store, limit, callers, seconds / 5).Go(&warmup);
  }
  const double cpu_before = ProcessCpuSeconds(primary.pid());
  const double replica_cpu_before = ProcessCpuSeconds(replica.pid());
  const double client_cpu_before = ProcessCpuSeconds(getpid());
  const int64_t waits_before = CommandCalls(primary.port(), "wait");
  const DurableWaitStats waited_before = store.durable_waits();
  const SteadyClock::time_point started = SteadyClock::now();
  std::vector<int64_t> latencies;
  Run run(store, limit, callers, seconds);
  const int64_t decisions = run.Go(&latencies);
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - started).count();
  const double cpu = ProcessCpuSeconds(primary.pid()) - cpu_before;
  const double replica_cpu = ProcessCpuSeconds(replica.pid()) - replica_cpu_before;
  const double client_cpu = ProcessCpuSeconds(getpid()) - client_cpu_before;
  const int64_t waits = CommandCalls(primary.port(), "wait") - waits_before;
  const DurableWaitStats waited = store.durable_waits();
  const int64_t timed = waited.wait_latency.count - waited_before.wait_latency.count;
  std::sort(latencies.begin(), latencies.end());
  auto at = [&](double q) {
    return latencies.empty()
               ? 0.0
               : static_cast<double>(latencies[std::min(
                     latencies.size() - 1,
                     static_cast<size_t>(q * static_cast<double>(latencies.size())))]);
  };
  Row row;
  row.per_second = static_cast<double>(decisions) / elapsed;
  row.p50_us = at(0.50);
  row.p99_us = at(0.99);
  auto per_decision = [&](double cpu_seconds) {
    return decisions > 0 ? cpu_seconds * 1e6 / static_cast<double>(decisions) : 0;
  };
  row.cpu_us_per_decision = per_decision(cpu);
  row.replica_cpu_us_per_decision = per_decision(replica_cpu);
  row.client_cpu_us_per_decision = per_decision(client_cpu);
  row.waits_per_decision =
      decisions > 0 ? static_cast<double>(waits) / static_cast<double>(decisions) : 0;
  row.wait_mean_us = timed > 0 ? static_cast<double>(waited.wait_latency.sum_micros -
                                                     waited_before.wait_latency.sum_micros) /
                                     static_cast<double>(timed)
                               : 0;
  row.errors = run.errors();
  return row;
}

Limit BenchLimit(bool durable) {
  Limit limit;
  limit.name = durable ? "bench_durable" : "bench_plain";
  limit.numbers = {
      .algorithm = Algorithm::kTokenBucket, .capacity = 1'000'000'000, .refill_per_second = 1e9};
  limit.timeout_micros = 1'000'000;
  limit.durable = durable;
  return limit;
}

int Main() {
  const double seconds = Quick() ? 0.5 : 3.0;
  std::unique_ptr<RedisProcess> primary = StartRedis();
  std::unique_ptr<RedisProcess> replica =
      StartRedis({"--replicaof", "127.0.0.1", std::to_string(primary->port())});
  if (!WaitReplicas(primary->port(), 1)) {
    std::fprintf(stderr, "durable_bench: the replica did not come online\n");
    return 1;
  }
  absl::StatusOr<std::shared_ptr<RedisConnections>> connections =
      RedisConnections::Connect({.url = absl::StrCat("redis://127.0.0.1:", primary->port())});
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      connections.ok() ? RedisStore::Create({.redis = *connections})
                       : absl::StatusOr<std::unique_ptr<RedisStore>>(connections.status());
  if (!store.ok()) {
    std::fprintf(stderr, "durable_bench: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "One primary and one replica on loopback; %.1f s per row; callers = checks outstanding.\n\n",
      seconds);
  std::printf(
      "| checks | callers | decisions/s | p50 µs | p99 µs | CPU µs/decision: primary, replica, "
      "client | WAITs/decision | decisions/WAIT | WAIT mean µs | errors |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double plain_at_64 = 0;
  double durable_at_64 = 0;
  double worst_waits = 0;
  for (int callers : {1, 8, 64}) {
    for (bool durable : {false, true}) {
      const Limit limit = BenchLimit(durable);
      const Row row = Measure(**store, limit, callers, seconds, *primary, *replica);
      std::printf("| %s | %d | %.0f | %.0f | %.0f | %.2f, %.2f, %.2f | %.3f | %s | %s | %lld |\n",
                  durable ? "durable" : "plain", callers, row.per_second, row.p50_us, row.p99_us,
                  row.cpu_us_per_decision, row.replica_cpu_us_per_decision,
                  row.client_cpu_us_per_decision, row.waits_per_decision,
                  durable && row.waits_per_decision > 0
                      ? absl::StrCat(std::lround(1 / row.waits_per_decision)).c_str()
                      : "-",
                  durable ? absl::StrCat(std::lround(row.wait_mean_us)).c_str() : "-",
                  static_cast<long long>(row.errors));
      if (callers == 64) (durable ? durable_at_64 : plain_at_64) = row.per_second;
      if (durable) worst_waits = std::max(worst_waits, row.waits_per_decision);
    }
  }
  const double ratio = plain_at_64 > 0 ? durable_at_64 / plain_at_64 : 0;
  std::printf("\nGoal: at most one WAIT per flush (WAITs/decision <= 1): %s (worst %.3f)\n",
              worst_waits <= 1.0 ? "met" : "NOT met", worst_waits);
  std::printf("Goal: durable >= 0.5x plain decisions/s at 64 callers: %s (%.2fx)\n",
              ratio >= 0.5 ? "met" : "NOT met", ratio);
  store->reset();
  return 0;
}

}  // namespace
}  // namespace tollgate::bench

int main() { return tollgate::bench::Main(); }
