// Copyright tollgate authors. What the load generators of bench/service_bench.sh share:
// the pacing of a slot (bench/http_load's connections, bench/grpc_load's and bench/h2_load's
// call slots), latency percentiles, and the flags and report of the two rate-limit API
// generators (grpc_load on gRPC C++, h2_load on libnghttp2), so that the same flags give the
// same load and the same `result ...` line whichever client runs it.
#ifndef TOLLGATE_BENCH_LOAD_COMMON_H_
#define TOLLGATE_BENCH_LOAD_COMMON_H_

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "process_cpu.h"

namespace tollgate::bench {

using LoadClock = std::chrono::steady_clock;

// One slot's turns at `rate / slots` per second (rate 0: closed loop, every turn at once).
// Slots start spread over one period, so that calls do not start in bursts; a late slot
// starts at once and does not catch up with a burst.
class Pacer {
 public:
  Pacer(double rate, int slots, int index) {
    if (rate <= 0) return;
    period_ = std::chrono::duration_cast<LoadClock::duration>(
        std::chrono::duration<double>(slots / rate));
    next_turn_ = LoadClock::now() + period_ * index / slots;
  }

  // The time of the next call: nullopt to issue it now.
  std::optional<LoadClock::time_point> Next() {
    if (period_ == LoadClock::duration::zero()) return std::nullopt;
    const LoadClock::time_point now = LoadClock::now();
    const LoadClock::time_point turn = next_turn_;
    next_turn_ = std::max(next_turn_, now) + period_;
    if (turn <= now) return std::nullopt;
    return turn;
  }

 private:
  LoadClock::duration period_ = LoadClock::duration::zero();
  LoadClock::time_point next_turn_;
};

// The `p` quantile (0..1) of `sorted` latencies; 0 when there are none.
inline int64_t Percentile(const std::vector<int32_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[index];
}

// The flags of bench/grpc_load and bench/h2_load (their headers describe them).
struct RlsLoadOptions {
  std::string target = "127.0.0.1:8081";
  std::string domain = "bench";
  std::string key = "user";
  std::string value_prefix = "u";
  int64_t keys = 10000;
  int descriptors = 1;
  int concurrency = 64;
  int channels = 2;
  double duration_seconds = 10;
  double warmup_seconds = 1;
  int64_t requests = 0;     // > 0: a fixed count instead of a duration (no warm-up)
  std::string server_pids;  // PID[,PID...]
  int redis_pid = 0;
  double timeout_seconds = 5;
  int client_threads = 1;  // grpc_load only
  double rate = 0;         // calls per second over all slots; 0: closed loop
};

// Parses the flags of `tool`; `--client-threads` only when `threads_flag`. Exits 2 with the
// usage on a bad flag or value.
inline RlsLoadOptions ParseRlsLoadOptions(int argc, char** argv, const char* tool,
                                          bool threads_flag) {
  const auto usage = [&](const std::string& message) {
    std::fprintf(stderr,
                 "%s: %s\nusage: %s [--target HOST:PORT] [--domain D] [--key K] "
                 "[--value-prefix P] [--keys N] [--descriptors N] [--concurrency N] "
                 "[--channels N] [--duration S] [--warmup S] [--requests N] "
                 "[--server-pid PID[,PID...]] [--redis-pid PID] [--timeout S] %s"
                 "[--rate CALLS_PER_SECOND]\n",
                 tool, message.c_str(), tool, threads_flag ? "[--client-threads N] " : "");
    std::exit(2);
  };
  RlsLoadOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value for " + flag);
    const char* value = argv[++i];
    if (flag == "--target") {
      options.target = value;
    } else if (flag == "--domain") {
      options.domain = value;
    } else if (flag == "--key") {
      options.key = value;
    } else if (flag == "--value-prefix") {
      options.value_prefix = value;
    } else if (flag == "--keys") {
      options.keys = std::atoll(value);
    } else if (flag == "--descriptors") {
      options.descriptors = std::atoi(value);
    } else if (flag == "--concurrency") {
      options.concurrency = std::atoi(value);
    } else if (flag == "--channels") {
      options.channels = std::atoi(value);
    } else if (flag == "--duration") {
      options.duration_seconds = std::atof(value);
    } else if (flag == "--warmup") {
      options.warmup_seconds = std::atof(value);
    } else if (flag == "--requests") {
      options.requests = std::atoll(value);
    } else if (flag == "--server-pid") {
      options.server_pids = value;
    } else if (flag == "--redis-pid") {
      options.redis_pid = std::atoi(value);
    } else if (flag == "--timeout") {
      options.timeout_seconds = std::atof(value);
    } else if (flag == "--client-threads" && threads_flag) {
      options.client_threads = std::atoi(value);
    } else if (flag == "--rate") {
      options.rate = std::atof(value);
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (options.keys < 1 || options.descriptors < 1 || options.concurrency < 1 ||
      options.channels < 1 || options.client_threads < 1 || options.duration_seconds <= 0 ||
      options.warmup_seconds < 0 || options.requests < 0 || options.rate < 0 ||
      options.timeout_seconds <= 0) {
    usage("numbers must be positive");
  }
  if (options.target.rfind(':') == std::string::npos) usage("--target is HOST:PORT");
  if (options.requests > 0) options.warmup_seconds = 0;
  return options;
}

// What one run of an RLS load generator measured.
// The answers of the measured calls and their latencies.
struct RlsTally {
  std::vector<int32_t> latencies_micros;  // sorted once the run is over
  int64_t ok = 0;
  int64_t over_limit = 0;
  int64_t errors = 0;
  std::string first_error;

  // One call that took `micros`: failed with `error` (non-empty), or answered, OVER_LIMIT
  // when `over` is set.
  void Record(int64_t micros, const std::string& error, bool over) {
    if (!error.empty()) {
      if (errors++ == 0) first_error = error;
    } else if (over) {
      ++over_limit;
    } else {
      ++ok;
    }
    latencies_micros.push_back(static_cast<int32_t>(std::min<int64_t>(micros, INT32_MAX)));
  }
  void Merge(const RlsTally& other) {
    latencies_micros.insert(latencies_micros.end(), other.latencies_micros.begin(),
                            other.latencies_micros.end());
    ok += other.ok;
    over_limit += other.over_limit;
    errors += other.errors;
    if (first_error.empty()) first_error = other.first_error;
  }
};

struct RlsLoadResult : RlsTally {
  double elapsed_seconds = 0;
  double server_cpu_seconds = -1;  // -1: not measured
  double redis_cpu_seconds = -1;
  double self_cpu_seconds = 0;
};

// The measured window of a run: wall time, and the CPU time of the server's processes
// (--server-pid), of Redis (--redis-pid) and of the load generator itself.
class MeasuredWindow {
 public:
  explicit MeasuredWindow(const RlsLoadOptions& options)
      : server_pids_(ParsePids(options.server_pids)), redis_pid_(options.redis_pid) {}

  void Start() {
    server_start_ = server_pids_.empty() ? -1 : ProcessesCpuSeconds(server_pids_);
    redis_start_ = redis_pid_ > 0 ? ProcessCpuSeconds(redis_pid_) : -1;
    self_start_ = ProcessCpuSeconds(getpid());
    start_ = LoadClock::now();
  }
  // Fills `result`'s times with what passed since Start().
  void Stop(RlsLoadResult& result) const {
    result.elapsed_seconds = std::chrono::duration<double>(LoadClock::now() - start_).count();
    if (!server_pids_.empty()) {
      result.server_cpu_seconds = ProcessesCpuSeconds(server_pids_) - server_start_;
    }
    if (redis_pid_ > 0) result.redis_cpu_seconds = ProcessCpuSeconds(redis_pid_) - redis_start_;
    result.self_cpu_seconds = ProcessCpuSeconds(getpid()) - self_start_;
  }

 private:
  const std::vector<int> server_pids_;
  const int redis_pid_;
  double server_start_ = -1;
  double redis_start_ = -1;
  double self_start_ = 0;
  LoadClock::time_point start_ = LoadClock::now();
};

// Prints the report, ending with the machine-readable `result ...` line.
inline void PrintRlsLoadReport(const RlsLoadOptions& options, const RlsLoadResult& result) {
  const std::vector<int32_t>& latencies = result.latencies_micros;
  const auto calls = static_cast<int64_t>(latencies.size());
  const int64_t decisions = (result.ok + result.over_limit) * options.descriptors;
  const double elapsed = result.elapsed_seconds;
  const double calls_per_second = elapsed > 0 ? calls / elapsed : 0;
  const double decisions_per_second = elapsed > 0 ? decisions / elapsed : 0;
  const double per_cpu = result.server_cpu_seconds > 0 ? decisions / result.server_cpu_seconds : 0;
  const int64_t max = latencies.empty() ? 0 : static_cast<int64_t>(latencies.back());
  std::printf("target %s, %d in flight over %d connections, %d descriptor(s) per call, %" PRId64
              " keys\n",
              options.target.c_str(), options.concurrency, options.channels, options.descriptors,
              options.keys);
  std::printf("calls %" PRId64 " in %.2f s: %.0f calls/s, %.0f decisions/s\n", calls, elapsed,
              calls_per_second, decisions_per_second);
  std::printf("answers: ok %" PRId64 ", over_limit %" PRId64 ", errors %" PRId64 "%s%s\n",
              result.ok, result.over_limit, result.errors,
              result.first_error.empty() ? "" : " (first: ",
              result.first_error.empty() ? "" : (result.first_error + ")").c_str());
  std::printf("latency us: p50 %" PRId64 ", p90 %" PRId64 ", p99 %" PRId64 ", p99.9 %" PRId64
              ", max %" PRId64 "\n",
              Percentile(latencies, 0.50), Percentile(latencies, 0.90), Percentile(latencies, 0.99),
              Percentile(latencies, 0.999), max);
  if (result.server_cpu_seconds >= 0) {
    std::printf("server CPU %.2f s (%.0f%% of one core): %.0f decisions per CPU-second\n",
                result.server_cpu_seconds, 100 * result.server_cpu_seconds / elapsed, per_cpu);
  }
  std::printf("load generator CPU %.2f s\n", result.self_cpu_seconds);
  std::printf("result calls=%" PRId64
              " seconds=%.3f calls_per_second=%.0f "
              "decisions_per_second=%.0f errors=%" PRId64 " over_limit=%" PRId64
              " server_cpu_seconds=%.3f redis_cpu_seconds=%.3f decisions_per_cpu_second=%.0f "
              "p50_us=%" PRId64 " p90_us=%" PRId64 " p99_us=%" PRId64 " max_us=%" PRId64 "\n",
              calls, elapsed, calls_per_second, decisions_per_second, result.errors,
              result.over_limit, result.server_cpu_seconds, result.redis_cpu_seconds, per_cpu,
              Percentile(latencies, 0.50), Percentile(latencies, 0.90), Percentile(latencies, 0.99),
              max);
}

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_LOAD_COMMON_H_
