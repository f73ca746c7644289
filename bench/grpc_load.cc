// Copyright tollgate authors. A load generator for Envoy's rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as Envoy calls tollgate.
//
//   grpc_load --target 127.0.0.1:8081 --domain bench --key user --keys 10000
//       --concurrency 64 --client-threads 2 --duration 10 --warmup 2 [--server-pid PID]
//       [--rate CALLS_PER_SECOND] [--redis-pid PID]
//
// Keeps `--concurrency` calls in flight (closed loop) over `--channels` HTTP/2 connections,
// driven by `--client-threads` completion-queue threads (gRPC's async API: no callback
// threads of its own), for `--duration` seconds after `--warmup` seconds, or for
// `--requests` calls. With `--rate`, calls start at that total rate instead (each of the
// `--concurrency` slots paced to rate / concurrency, never more than one call in flight per
// slot): servers compared at one offered load do the same batching per wake-up, so their
// CPU-seconds per decision compare fairly. Each call carries `--descriptors` descriptors (key,
// "<prefix><n>"), n drawn uniformly from `--keys`. Reports calls and decisions per second, the
// answers (OK / OVER_LIMIT / errors) and latency percentiles of the measured calls; with
// `--server-pid`, also the server's CPU time over the measured window (from
// /proc/PID/stat) and decisions per CPU-second of the server; with `--redis-pid`, the CPU time
// of that process (the Redis server) over the same window. The last line is
// machine-readable: `result calls=... decisions_per_cpu_second=... p50_us=... p99_us=...`.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "process_cpu.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace {

using tollgate::bench::ProcessCpuSeconds;

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using Clock = std::chrono::steady_clock;

struct Options {
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
  int64_t requests = 0;  // > 0: a fixed count instead of a duration (no warmup)
  int server_pid = 0;
  int redis_pid = 0;
  double timeout_seconds = 5;
  int client_threads = 1;
  double rate = 0;  // calls per second over all slots; 0: closed loop
};

[[noreturn]] void Usage(const char* message) {
  std::fprintf(stderr,
               "grpc_load: %s\nusage: grpc_load [--target HOST:PORT] [--domain D] [--key K] "
               "[--value-prefix P] [--keys N] [--descriptors N] [--concurrency N] [--channels N] "
               "[--duration S] [--warmup S] [--requests N] [--server-pid PID] [--timeout S] "
               "[--client-threads N] [--rate CALLS_PER_SECOND] [--redis-pid PID]\n",
               message);
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + flag).c_str());
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
      options.server_pid = std::atoi(value);
    } else if (flag == "--redis-pid") {
      options.redis_pid = std::atoi(value);
    } else if (flag == "--timeout") {
      options.timeout_seconds = std::atof(value);
    } else if (flag == "--client-threads") {
      options.client_threads = std::atoi(value);
    } else if (flag == "--rate") {
      options.rate = std::atof(value);
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  if (options.keys < 1 || options.descriptors < 1 || options.concurrency < 1 ||
      options.channels < 1 || options.client_threads < 1 || options.duration_seconds <= 0 ||
      options.warmup_seconds < 0 || options.requests < 0 || options.rate < 0) {
    Usage("numbers must be positive");
  }
  if (options.requests > 0) options.warmup_seconds = 0;
  return options;
}

double SelfCpuSeconds() { return ProcessCpuSeconds(getpid()); }

enum class Phase { kWarmup, kMeasure, kStop };

// Shared by all slots. Latencies are recorded per slot (a slot runs one call at a time),
// merged at the end.
struct Run {
  Options options;
  std::vector<std::unique_ptr<RateLimitService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  std::atomic<Phase> phase{Phase::kWarmup};
  std::atomic<int64_t> started{0};  // with --requests: calls started
  std::atomic<int> active_slots{0};
  absl::Notification all_done;
};

struct SlotStats {
  std::vector<int32_t> latencies_micros;
  int64_t ok = 0;
  int64_t over_limit = 0;
  int64_t errors = 0;
  std::string first_error;
};

// One in-flight call at a time, reissued when its completion comes off the queue (with
// --rate, at its next turn: a gRPC alarm on the same queue). The slot itself is the
// completion-queue tag of both.
class Slot {
 public:
  Slot(Run& run, int index) : run_(run), index_(index), random_(index * 7919 + 17) {
    stats_.latencies_micros.reserve(1 << 16);
    if (run_.options.rate > 0) {
      period_ = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(run_.options.concurrency / run_.options.rate));
      // Slots spread over one period, so that calls do not start in bursts.
      next_turn_ = Clock::now() + period_ * index / run_.options.concurrency;
    }
  }

  void Start() { Wait(); }
  SlotStats& stats() { return stats_; }

  // A completion of this slot's tag: its alarm or its call.
  void Event() {
    if (waiting_) {
      waiting_ = false;
      Issue();
      return;
    }
    Completed();
  }

 private:
  // Issues the next call now, or (with --rate) sets an alarm for its turn.
  void Wait() {
    if (period_ == Clock::duration::zero()) {
      Issue();
      return;
    }
    const Clock::time_point now = Clock::now();
    const Clock::time_point turn = next_turn_;
    // A late slot starts at once and does not catch up with a burst.
    next_turn_ = std::max(next_turn_, now) + period_;
    if (turn <= now) {
      Issue();
      return;
    }
    waiting_ = true;
    alarm_.Set(run_.queues[index_ % run_.queues.size()].get(),
               std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(turn - now),
               this);
  }

  // The call finished (`status_` and `response_` are set).
  void Completed() {
    const int64_t micros =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
    // Counted only when the call both started and ended inside the measured window.
    if (phase_at_start_ == Phase::kMeasure &&
        (run_.options.requests > 0 ||
         run_.phase.load(std::memory_order_acquire) == Phase::kMeasure)) {
      if (!status_.ok()) {
        if (stats_.errors++ == 0) stats_.first_error = status_.error_message();
      } else if (response_.overall_code() == RateLimitResponse::OVER_LIMIT) {
        ++stats_.over_limit;
      } else {
        ++stats_.ok;
      }
      stats_.latencies_micros.push_back(static_cast<int32_t>(std::min<int64_t>(micros, INT32_MAX)));
    }
    Wait();
  }

  void Issue() {
    if (run_.phase.load(std::memory_order_acquire) == Phase::kStop ||
        (run_.options.requests > 0 &&
         run_.started.fetch_add(1, std::memory_order_relaxed) >= run_.options.requests)) {
      if (run_.active_slots.fetch_sub(1) == 1) run_.all_done.Notify();
      return;
    }
    request_.Clear();
    request_.set_domain(run_.options.domain);
    std::uniform_int_distribution<int64_t> pick(0, run_.options.keys - 1);
    for (int i = 0; i < run_.options.descriptors; ++i) {
      auto* entry = request_.add_descriptors()->add_entries();
      entry->set_key(i == 0 ? run_.options.key : run_.options.key + std::to_string(i));
      entry->set_value(run_.options.value_prefix + std::to_string(pick(random_)));
    }
    response_.Clear();
    context_ = std::make_unique<grpc::ClientContext>();
    context_->set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(run_.options.timeout_seconds * 1e6)));
    phase_at_start_ = run_.phase.load(std::memory_order_acquire);
    start_ = Clock::now();
    auto& stub = *run_.stubs[index_ % run_.stubs.size()];
    grpc::CompletionQueue* cq = run_.queues[index_ % run_.queues.size()].get();
    reader_ = stub.AsyncShouldRateLimit(context_.get(), request_, cq);
    reader_->Finish(&response_, &status_, this);
  }

  Run& run_;
  const int index_;
  std::mt19937_64 random_;
  RateLimitRequest request_;
  RateLimitResponse response_;
  grpc::Status status_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<RateLimitResponse>> reader_;
  Phase phase_at_start_ = Phase::kWarmup;
  Clock::time_point start_;
  SlotStats stats_;
  // With --rate: the time between a slot's calls, and when its next call may start.
  Clock::duration period_ = Clock::duration::zero();
  Clock::time_point next_turn_;
  bool waiting_ = false;
  grpc::Alarm alarm_;
};

int64_t Percentile(const std::vector<int32_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[index];
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.options = ParseOptions(argc, argv);
  const Options& options = run.options;
  for (int i = 0; i < options.channels; ++i) {
    grpc::ChannelArguments arguments;
    // Separate connections, not one shared subchannel.
    arguments.SetInt("grpc.channel_id", i);
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel =
        grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), arguments);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "grpc_load: cannot connect to %s\n", options.target.c_str());
      return 1;
    }
    run.stubs.push_back(RateLimitService::NewStub(channel));
  }

  if (options.requests > 0) run.phase = Phase::kMeasure;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.client_threads; ++i) {
    run.queues.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < options.concurrency; ++i) slots.push_back(std::make_unique<Slot>(run, i));
  run.active_slots = options.concurrency;
  for (auto& slot : slots) slot->Start();
  for (auto& queue : run.queues) {
    threads.emplace_back([cq = queue.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) static_cast<Slot*>(tag)->Event();
    });
  }

  if (options.warmup_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.warmup_seconds));
    run.phase = Phase::kMeasure;
  }
  const double server_cpu_start =
      options.server_pid > 0 ? ProcessCpuSeconds(options.server_pid) : -1;
  const double redis_cpu_start = options.redis_pid > 0 ? ProcessCpuSeconds(options.redis_pid) : -1;
  const double self_cpu_start = SelfCpuSeconds();
  const Clock::time_point measure_start = Clock::now();
  if (options.requests == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.duration_seconds));
    run.phase = Phase::kStop;
  }
  const auto wait_end = [&] {
    return run.all_done.WaitForNotificationWithTimeout(absl::Seconds(options.timeout_seconds + 30));
  };
  double elapsed = 0, server_cpu = -1, redis_cpu = -1, self_cpu = 0;
  if (options.requests == 0) {
    // The window ends now; calls still in flight finish uncounted.
    elapsed = std::chrono::duration<double>(Clock::now() - measure_start).count();
    if (options.server_pid > 0)
      server_cpu = ProcessCpuSeconds(options.server_pid) - server_cpu_start;
    if (options.redis_pid > 0) redis_cpu = ProcessCpuSeconds(options.redis_pid) - redis_cpu_start;
    self_cpu = SelfCpuSeconds() - self_cpu_start;
    if (!wait_end()) {
      std::fprintf(stderr, "grpc_load: calls still in flight long after their deadline\n");
      std::_Exit(1);
    }
  } else {
    if (!wait_end()) {
      std::fprintf(stderr, "grpc_load: calls still in flight long after their deadline\n");
      std::_Exit(1);
    }
    elapsed = std::chrono::duration<double>(Clock::now() - measure_start).count();
    if (options.server_pid > 0)
      server_cpu = ProcessCpuSeconds(options.server_pid) - server_cpu_start;
    if (options.redis_pid > 0) redis_cpu = ProcessCpuSeconds(options.redis_pid) - redis_cpu_start;
    self_cpu = SelfCpuSeconds() - self_cpu_start;
  }

  for (auto& queue : run.queues) queue->Shutdown();
  for (std::thread& thread : threads) thread.join();

  std::vector<int32_t> latencies;
  int64_t ok = 0, over_limit = 0, errors = 0;
  std::string first_error;
  for (auto& slot : slots) {
    SlotStats& stats = slot->stats();
    latencies.insert(latencies.end(), stats.latencies_micros.begin(), stats.latencies_micros.end());
    ok += stats.ok;
    over_limit += stats.over_limit;
    errors += stats.errors;
    if (first_error.empty()) first_error = stats.first_error;
  }
  std::sort(latencies.begin(), latencies.end());
  const int64_t calls = static_cast<int64_t>(latencies.size());
  const int64_t decisions = (ok + over_limit) * options.descriptors;
  const double calls_per_second = calls / elapsed;
  const double decisions_per_second = decisions / elapsed;
  const double per_cpu = server_cpu > 0 ? decisions / server_cpu : 0;

  std::printf("target %s, %d in flight over %d channels, %d descriptor(s) per call, %" PRId64
              " keys\n",
              options.target.c_str(), options.concurrency, options.channels, options.descriptors,
              options.keys);
  std::printf("calls %" PRId64 " in %.2f s: %.0f calls/s, %.0f decisions/s\n", calls, elapsed,
              calls_per_second, decisions_per_second);
  std::printf("answers: ok %" PRId64 ", over_limit %" PRId64 ", errors %" PRId64 "%s%s\n", ok,
              over_limit, errors, first_error.empty() ? "" : " (first: ",
              first_error.empty() ? "" : (first_error + ")").c_str());
  std::printf("latency us: p50 %" PRId64 ", p90 %" PRId64 ", p99 %" PRId64 ", p99.9 %" PRId64
              ", max %" PRId64 "\n",
              Percentile(latencies, 0.50), Percentile(latencies, 0.90), Percentile(latencies, 0.99),
              Percentile(latencies, 0.999),
              latencies.empty() ? 0 : static_cast<int64_t>(latencies.back()));
  if (server_cpu >= 0) {
    std::printf("server CPU %.2f s (%.0f%% of one core): %.0f decisions per CPU-second\n",
                server_cpu, 100 * server_cpu / elapsed, per_cpu);
  }
  std::printf("load generator CPU %.2f s\n", self_cpu);
  std::printf("result calls=%" PRId64
              " seconds=%.3f calls_per_second=%.0f "
              "decisions_per_second=%.0f errors=%" PRId64 " over_limit=%" PRId64
              " server_cpu_seconds=%.3f redis_cpu_seconds=%.3f decisions_per_cpu_second=%.0f "
              "p50_us=%" PRId64 " p90_us=%" PRId64 " p99_us=%" PRId64 " max_us=%" PRId64 "\n",
              calls, elapsed, calls_per_second, decisions_per_second, errors, over_limit,
              server_cpu, redis_cpu, per_cpu, Percentile(latencies, 0.50),
              Percentile(latencies, 0.90), Percentile(latencies, 0.99),
              latencies.empty() ? 0 : static_cast<int64_t>(latencies.back()));
  return errors > 0 ? 1 : 0;
}
