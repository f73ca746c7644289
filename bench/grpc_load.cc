// Copyright tollgate authors. A load generator for Envoy's rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as Envoy calls tollgate.
//
//   grpc_load --target 127.0.0.1:8081 --domain bench --key user --keys 10000
//       --concurrency 64 --client-threads 2 --duration 10 --warmup 2 [--server-pid PID[,PID...]]
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
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "load_common.h"
#include "process_cpu.h"

namespace {

using tollgate::bench::MeasuredWindow;
using tollgate::bench::Pacer;
using tollgate::bench::ParseRlsLoadOptions;
using tollgate::bench::PrintRlsLoadReport;
using tollgate::bench::RlsLoadOptions;
using tollgate::bench::RlsLoadResult;
using tollgate::bench::RlsTally;

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using Clock = std::chrono::steady_clock;

enum class Phase { kWarmup, kMeasure, kStop };

// Shared by all slots. Latencies are recorded per slot (a slot runs one call at a time),
// merged at the end.
struct Run {
  RlsLoadOptions options;
  std::vector<std::unique_ptr<RateLimitService::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  std::atomic<Phase> phase{Phase::kWarmup};
  std::atomic<int64_t> started{0};  // with --requests: calls started
  std::atomic<int> active_slots{0};
  absl::Notification all_done;
};

// One in-flight call at a time, reissued when its completion comes off the queue (with
// --rate, at its next turn: a gRPC alarm on the same queue). The slot itself is the
// completion-queue tag of both.
class Slot {
 public:
  Slot(Run& run, int index)
      : run_(run),
        index_(index),
        random_(index * 7919 + 17),
        pacer_(run.options.rate, run.options.concurrency, index) {
    stats_.latencies_micros.reserve(1 << 16);
  }

  void Start() { Wait(); }
  RlsTally& stats() { return stats_; }

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
    const std::optional<Clock::time_point> turn = pacer_.Next();
    if (!turn.has_value()) {
      Issue();
      return;
    }
    const Clock::time_point now = Clock::now();
    waiting_ = true;
    alarm_.Set(run_.queues[index_ % run_.queues.size()].get(),
               std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(*turn - now),
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
      stats_.Record(micros, status_.ok() ? std::string() : status_.error_message(),
                    status_.ok() && response_.overall_code() == RateLimitResponse::OVER_LIMIT);
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
  RlsTally stats_;
  Pacer pacer_;  // with --rate, when the next call may start
  bool waiting_ = false;
  grpc::Alarm alarm_;
};

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.options = ParseRlsLoadOptions(argc, argv, "grpc_load", /*threads_flag=*/true);
  const RlsLoadOptions& options = run.options;
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
  MeasuredWindow window(options);
  window.Start();
  if (options.requests == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.duration_seconds));
    run.phase = Phase::kStop;
  }
  const auto wait_end = [&] {
    return run.all_done.WaitForNotificationWithTimeout(absl::Seconds(options.timeout_seconds + 30));
  };
  RlsLoadResult result;
  // With a duration the window ends now (calls still in flight finish uncounted); with
  // --requests when the last call has ended.
  if (options.requests == 0) window.Stop(result);
  if (!wait_end()) {
    std::fprintf(stderr, "grpc_load: calls still in flight long after their deadline\n");
    std::_Exit(1);
  }
  if (options.requests > 0) window.Stop(result);

  for (auto& queue : run.queues) queue->Shutdown();
  for (std::thread& thread : threads) thread.join();

  for (auto& slot : slots) {
    result.Merge(slot->stats());
  }
  std::sort(result.latencies_micros.begin(), result.latencies_micros.end());
  PrintRlsLoadReport(options, result);
  return result.errors > 0 ? 1 : 0;
}
