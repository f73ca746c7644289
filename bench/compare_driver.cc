// Copyright tollgate authors. compare_driver: drives tollgate as fast as it goes, for the
// side-by-side comparison of `make bench` (bench/compare.py) and its smoke test.
//
//   compare_driver --via library --redis redis://127.0.0.1:6379 --algorithm token_bucket
//                  --callers 64 --keys 1000 --duration-s 5
//   compare_driver --via library --redis URL --mode multi --callers 64 --duration-s 5
//   compare_driver --via library --redis URL --mode sync --keys 1 --callers 2 --duration-s 5
//   compare_driver --via library --redis URL --mode charge --callers 64 --duration-s 5
//   compare_driver --via library --redis URL --mode lease --callers 64 --duration-s 5
//   compare_driver --via library --redis URL --rate 20000 --duration-s 5   # open loop
//   compare_driver --via http --target 127.0.0.1:8080 --callers 8 --duration-s 5
//   compare_driver ... --requests 600 --limit 25 --window-s 3600     # fixed count, smoke test
//   compare_driver ... --connections 1     # RedisStoreOptions::connections (default 2)
//
// Closed loop (the default): `--callers` checks are always outstanding, each issued as soon
// as the previous one of its caller is answered, on keys user:0 .. user:<keys-1> in turn.
// Open loop (`--rate`): checks are issued on schedule whatever the answers, and latency is
// counted from when a check was due, so a stall is not hidden (no coordinated omission).
//
// Library rows use tollgate::Limiter over a RedisStore (exact) or a SyncStore (sync), with
// no ResilientStore on top (no deadline), so the figure is the store's. `--mode multi` checks
// one limit of each algorithm for the same key in one all-or-nothing request. `--mode charge`
// charges the limit (Limiter::CheckAllAsync with ItemOp::kCharge) instead of checking it.
// `--mode lease` holds a concurrency limit's slot and frees it: each decision is one lease,
// acquired (a concurrency item) and then released (Limiter::ReleaseAsync), so a decision
// costs two store calls and its latency is both. HTTP rows POST
// /v1/check to a running `tollgate serve` over one keep-alive connection per caller.
//
// Prints one JSON object on stdout:
//   {"decisions":N,"allowed":N,"denied":N,"errors":N,"seconds":S,"per_second":R,
//    "p50_us":X,"p99_us":X,"cpu_s":S,"cpu_s_per_million":S}
// cpu_s is this process' user+system CPU (getrusage) over the measured interval: the limiter
// for library rows, the load driver for HTTP rows. With --duration-s, the first
// `--warmup-s` seconds are run but not measured. Exits non-zero on bad arguments or when the
// limiter cannot start.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "tollgate/limiter.h"
#include "tollgate/redis_store.h"
#include "tollgate/sync_store.h"

namespace tollgate::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct DriverOptions {
  std::string via = "library";  // library | http
  std::string mode = "exact";   // exact | multi | sync | charge | lease
  std::string redis_url;
  std::string target;  // host:port of tollgate serve, for --via http
  std::string algorithm = "token_bucket";
  int callers = 8;
  int64_t keys = 1000;
  int64_t limit = 1'000'000'000;
  double window_s = 60;
  double refill_per_second = 0;  // 0: limit / window_s
  double duration_s = 0;
  double warmup_s = -1;  // -1: min(1, duration / 5)
  int64_t requests = 0;
  double rate = 0;
  double sync_interval_s = 0.1;
  std::string key_prefix = "tollgate:";
  int connections = 0;  // 0: RedisStoreOptions' default
};

void Usage() {
  std::fprintf(stderr,
               "usage: compare_driver [--via library|http] [--mode exact|multi|sync|charge|lease]\n"
               "  [--redis URL] [--target HOST:PORT] [--algorithm token_bucket|fixed_window|"
               "sliding_window]\n"
               "  [--callers N] [--keys N] [--limit N] [--window-s S] [--refill R]\n"
               "  (--duration-s S [--warmup-s S] | --requests N) [--rate R]\n"
               "  [--sync-interval-s S] [--key-prefix P] [--connections N]\n");
}

bool ParseArgs(int argc, char** argv, DriverOptions* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "compare_driver: %s needs a value\n", argv[i]);
      return false;
    }
    const absl::string_view value = argv[++i];
    bool ok = true;
    if (flag == "--via") {
      options->via = std::string(value);
    } else if (flag == "--mode") {
      options->mode = std::string(value);
    } else if (flag == "--redis") {
      options->redis_url = std::string(value);
    } else if (flag == "--target") {
      options->target = std::string(value);
    } else if (flag == "--algorithm") {
      options->algorithm = std::string(value);
    } else if (flag == "--callers") {
      ok = absl::SimpleAtoi(value, &options->callers) && options->callers > 0;
    } else if (flag == "--keys") {
      ok = absl::SimpleAtoi(value, &options->keys) && options->keys > 0;
    } else if (flag == "--limit") {
      ok = absl::SimpleAtoi(value, &options->limit) && options->limit > 0;
    } else if (flag == "--window-s") {
      ok = absl::SimpleAtod(value, &options->window_s) && options->window_s > 0;
    } else if (flag == "--refill") {
      ok = absl::SimpleAtod(value, &options->refill_per_second) && options->refill_per_second > 0;
    } else if (flag == "--duration-s") {
      ok = absl::SimpleAtod(value, &options->duration_s) && options->duration_s > 0;
    } else if (flag == "--warmup-s") {
      ok = absl::SimpleAtod(value, &options->warmup_s) && options->warmup_s >= 0;
    } else if (flag == "--requests") {
      ok = absl::SimpleAtoi(value, &options->requests) && options->requests > 0;
    } else if (flag == "--rate") {
      ok = absl::SimpleAtod(value, &options->rate) && options->rate > 0;
    } else if (flag == "--sync-interval-s") {
      ok = absl::SimpleAtod(value, &options->sync_interval_s) && options->sync_interval_s > 0;
    } else if (flag == "--connections") {
      ok = absl::SimpleAtoi(value, &options->connections) && options->connections > 0;
    } else if (flag == "--key-prefix") {
      options->key_prefix = std::string(value);
    } else {
      std::fprintf(stderr, "compare_driver: unknown flag %s\n", argv[i - 1]);
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "compare_driver: bad value for %s: %s\n", argv[i - 1], argv[i]);
      return false;
    }
  }
  if ((options->duration_s > 0) == (options->requests > 0)) {
    std::fprintf(stderr, "compare_driver: give exactly one of --duration-s and --requests\n");
    return false;
  }
  if (options->via == "library" && options->redis_url.empty()) {
    std::fprintf(stderr, "compare_driver: --via library needs --redis\n");
    return false;
  }
  if (options->via == "http" && options->target.empty()) {
    std::fprintf(stderr, "compare_driver: --via http needs --target\n");
    return false;
  }
  if (options->via == "http" && options->rate > 0) {
    std::fprintf(stderr, "compare_driver: --rate is for --via library only\n");
    return false;
  }
  if (options->warmup_s < 0) options->warmup_s = std::min(1.0, options->duration_s / 5);
  if (options->requests > 0) options->warmup_s = 0;
  return true;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// What the callers saw: counts and latencies of the measured checks, from any thread.
class Tally {
 public:
  // Every answered check counts in `total_decisions` (for per-decision Redis costs, which
  // cannot leave out the warm-up); only `measured` ones in the rest.
  void Record(int64_t started_ns, int64_t finished_ns, bool ok, bool allowed, bool measured) {
    absl::MutexLock lock(&mu_);
    if (ok) ++total_decisions_;
    if (!measured && ok) return;
    if (!ok) {
      ++errors_;
    } else if (allowed) {
      ++allowed_;
    } else {
      ++denied_;
    }
    latencies_ns_.push_back(finished_ns - started_ns);
  }

  // Prints the JSON line. `seconds` and `cpu_s` cover the measured interval.
  void Print(double seconds, double cpu_s) {
    absl::MutexLock lock(&mu_);
    std::sort(latencies_ns_.begin(), latencies_ns_.end());
    auto percentile = [&](double p) {
      if (latencies_ns_.empty()) return 0.0;
      size_t index = static_cast<size_t>(p * static_cast<double>(latencies_ns_.size() - 1));
      return static_cast<double>(latencies_ns_[index]) / 1000.0;
    };
    const int64_t decisions = allowed_ + denied_;
    const double per_second = seconds > 0 ? static_cast<double>(decisions) / seconds : 0;
    const double cpu_per_million = decisions > 0 ? cpu_s * 1e6 / static_cast<double>(decisions) : 0;
    std::printf(
        "{\"decisions\":%lld,\"allowed\":%lld,\"denied\":%lld,\"errors\":%lld,"
        "\"seconds\":%.4f,\"per_second\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
        "\"cpu_s\":%.4f,\"cpu_s_per_million\":%.3f,\"total_decisions\":%lld}\n",
        static_cast<long long>(decisions), static_cast<long long>(allowed_),
        static_cast<long long>(denied_), static_cast<long long>(errors_), seconds, per_second,
        percentile(0.50), percentile(0.99), cpu_s, cpu_per_million,
        static_cast<long long>(total_decisions_));
    std::fflush(stdout);
  }

 private:
  absl::Mutex mu_;
  int64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t denied_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_decisions_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> latencies_ns_ ABSL_GUARDED_BY(mu_);
};

// When to issue and what to count, shared by every caller.
class Schedule {
 public:
  explicit Schedule(const DriverOptions& options) : options_(options) {
    start_ns_ = NowNanos();
    measure_start_ns_ = start_ns_ + static_cast<int64_t>(options.warmup_s * 1e9);
    end_ns_ = options.duration_s > 0
                  ? measure_start_ns_ + static_cast<int64_t>(options.duration_s * 1e9)
                  : INT64_MAX;
  }

  // Claims the next check to issue; false once the run is over (time or count).
  bool Next(int64_t now_ns, int64_t* sequence) {
    if (now_ns >= end_ns_) return false;
    const int64_t claimed = issued_.fetch_add(1, std::memory_order_relaxed);
    if (options_.requests > 0 && claimed >= options_.requests) return false;
    *sequence = claimed;
    return true;
  }
  bool Measured(int64_t started_ns) const { return started_ns >= measure_start_ns_; }
  int64_t measure_start_ns() const { return measure_start_ns_; }
  int64_t end_ns() const { return end_ns_; }

 private:
  const DriverOptions& options_;
  int64_t start_ns_ = 0;
  int64_t measure_start_ns_ = 0;
  int64_t end_ns_ = 0;
  std::atomic<int64_t> issued_{0};
};

std::string KeyFor(const DriverOptions& options, int64_t sequence) {
  return absl::StrCat("user:", sequence % options.keys);
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name == "token_bucket") return Algorithm::kTokenBucket;
  if (name == "fixed_window") return Algorithm::kFixedWindow;
  if (name == "sliding_window") return Algorithm::kSlidingWindow;
  return absl::InvalidArgumentError(absl::StrCat("unknown algorithm ", std::string(name)));
}

Limit MakeLimit(const DriverOptions& options, std::string name, Algorithm algorithm) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = algorithm;
  limit.numbers.capacity = options.limit;
  limit.numbers.refill_per_second = options.refill_per_second > 0
                                        ? options.refill_per_second
                                        : static_cast<double>(options.limit) / options.window_s;
  limit.numbers.limit = options.limit;
  limit.numbers.window_micros = static_cast<int64_t>(options.window_s * 1e6);
  return limit;
}

// The limits of a run and the request each check sends (before its key is filled in).
struct Workload {
  std::vector<Limit> limits;
  std::vector<CheckRequest> request;
};

absl::StatusOr<Workload> MakeWorkload(const DriverOptions& options) {
  Workload workload;
  if (options.mode == "multi") {
    workload.limits.push_back(MakeLimit(options, "bench_tb", Algorithm::kTokenBucket));
    workload.limits.push_back(MakeLimit(options, "bench_fw", Algorithm::kFixedWindow));
    workload.limits.push_back(MakeLimit(options, "bench_sw", Algorithm::kSlidingWindow));
  } else if (options.mode == "lease") {
    Limit limit = MakeLimit(options, "bench_lease", Algorithm::kConcurrency);
    limit.numbers.window_micros = 60'000'000;  // the lease time: longer than any run
    workload.limits.push_back(std::move(limit));
  } else {
    absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(options.algorithm);
    if (!algorithm.ok()) return algorithm.status();
    Limit limit = MakeLimit(options, "bench", *algorithm);
    if (options.mode == "sync") {
      limit.mode = Mode::kSync;
      limit.sync_interval_micros = static_cast<int64_t>(options.sync_interval_s * 1e6);
    } else if (options.mode != "exact" && options.mode != "charge") {
      return absl::InvalidArgumentError(absl::StrCat("unknown mode ", options.mode));
    }
    workload.limits.push_back(std::move(limit));
  }
  for (const Limit& limit : workload.limits) workload.request.push_back({limit.name, "", 1});
  return workload;
}

absl::StatusOr<std::unique_ptr<Limiter>> MakeLimiter(const DriverOptions& options,
                                                     const Workload& workload) {
  LimiterOptions limiter_options;
  limiter_options.limits = workload.limits;
  // The driver may start before redis-server listens: retry for up to 5 s.
  absl::Status last = absl::UnknownError("not tried");
  for (int attempt = 0; attempt < 250; ++attempt) {
    RedisConnectionsOptions connection{.url = options.redis_url};
    if (options.connections > 0) connection.connections = options.connections;
    absl::StatusOr<std::shared_ptr<RedisConnections>> redis = RedisConnections::Connect(connection);
    if (!redis.ok()) {
      last = redis.status();
    } else if (options.mode == "sync") {
      absl::StatusOr<std::unique_ptr<SyncStore>> store =
          SyncStore::Create({.redis = *redis, .key_prefix = options.key_prefix});
      if (store.ok()) {
        limiter_options.sync_store = *std::move(store);
        break;
      }
      last = store.status();
    } else {
      absl::StatusOr<std::unique_ptr<RedisStore>> store =
          RedisStore::Create({.redis = *redis, .key_prefix = options.key_prefix});
      if (store.ok()) {
        limiter_options.store = *std::move(store);
        break;
      }
      last = store.status();
    }
    if (attempt == 0) {
      std::fprintf(stderr, "compare_driver: waiting for Redis: %s\n", last.ToString().c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (limiter_options.store == nullptr && limiter_options.sync_store == nullptr) return last;
  return Limiter::Create(std::move(limiter_options));
}

// Waits until every outstanding check has been answered.
class Outstanding {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--count_ == 0) cv_.notify_all();
  }
  int64_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  void WaitForZero() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t count_ = 0;
};

// Closed loop over the asynchronous API: each caller re-issues from its own callback (on
// the store's I/O thread; RedisStore never answers inline except to fail fast).
struct AsyncLoop {
  const DriverOptions& options;
  const Workload& workload;
  Limiter& limiter;
  Schedule& schedule;
  Tally& tally;
  Outstanding& outstanding;

  void Issue() {
    const int64_t started_ns = NowNanos();
    int64_t sequence = 0;
    if (!schedule.Next(started_ns, &sequence)) {
      outstanding.Done();
      return;
    }
    if (options.mode == "charge" || options.mode == "lease") {
      IssueMetered(started_ns, KeyFor(options, sequence));
      return;
    }
    std::vector<CheckRequest> request = workload.request;
    const std::string key = KeyFor(options, sequence);
    for (CheckRequest& item : request) item.key = key;
    limiter.CheckAllAsync(
        std::move(request), [this, started_ns](absl::StatusOr<MultiDecision> decision) {
          tally.Record(started_ns, NowNanos(), decision.ok(), decision.ok() && decision->allowed,
                       schedule.Measured(started_ns));
          // A failure may be answered inline (not connected): this
          // caller stops rather than recurse; the error is reported.
          if (!decision.ok()) {
            outstanding.Done();
            return;
          }
          Issue();
        });
  }

  // One charge, or one lease taken and released, for `key`.
  void IssueMetered(int64_t started_ns, const std::string& key) {
    const Limit* limit = limiter.FindLimit(workload.limits[0].name);
    CheckRequest item{*limit, key, 1};
    if (options.mode == "charge") item.op = ItemOp::kCharge;
    limiter.CheckAllAsync({std::move(item)}, [this, started_ns, limit,
                                              key](absl::StatusOr<MultiDecision> decision) {
      if (options.mode == "charge" || !decision.ok() || !decision->allowed) {
        Finish(started_ns, decision.ok(), decision.ok() && decision->allowed);
        return;
      }
      limiter.ReleaseAsync(*limit, key, decision->tokens[0],
                           [this, started_ns](absl::StatusOr<Decision> released) {
                             Finish(started_ns, released.ok(), released.ok() && released->allowed);
                           });
    });
  }

  void Finish(int64_t started_ns, bool ok, bool allowed) {
    tally.Record(started_ns, NowNanos(), ok, allowed, schedule.Measured(started_ns));
    if (!ok) {
      outstanding.Done();  // as in Issue: this caller stops rather than recurse
      return;
    }
    Issue();
  }
};

// Open loop: checks due at i / rate, issued by one pacing thread, latency from when due.
void RunOpenLoop(const DriverOptions& options, const Workload& workload, Limiter& limiter,
                 Schedule& schedule, Tally& tally, Outstanding& outstanding) {
  const int64_t begin_ns = NowNanos();
  const double interval_ns = 1e9 / options.rate;
  int64_t next = 0;
  for (;;) {
    const int64_t now_ns = NowNanos();
    const int64_t due = static_cast<int64_t>(static_cast<double>(now_ns - begin_ns) / interval_ns);
    bool over = false;
    for (; next <= due; ++next) {
      const int64_t due_ns =
          begin_ns + static_cast<int64_t>(static_cast<double>(next) * interval_ns);
      int64_t sequence = 0;
      if (!schedule.Next(now_ns, &sequence)) {
        over = true;
        break;
      }
      std::vector<CheckRequest> request = workload.request;
      const std::string key = KeyFor(options, sequence);
      for (CheckRequest& item : request) item.key = key;
      outstanding.Add();
      limiter.CheckAllAsync(
          std::move(request), [&, due_ns](absl::StatusOr<MultiDecision> decision) {
            tally.Record(due_ns, NowNanos(), decision.ok(), decision.ok() && decision->allowed,
                         schedule.Measured(due_ns));
            outstanding.Done();
          });
    }
    if (over) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Blocking callers, one thread each: for stores that answer inline (sync mode).
void RunBlockingLoop(const DriverOptions& options, const Workload& workload, Limiter& limiter,
                     Schedule& schedule, Tally& tally) {
  std::vector<std::thread> threads;
  for (int caller = 0; caller < options.callers; ++caller) {
    threads.emplace_back([&] {
      std::vector<CheckRequest> request = workload.request;
      for (;;) {
        const int64_t started_ns = NowNanos();
        int64_t sequence = 0;
        if (!schedule.Next(started_ns, &sequence)) return;
        const std::string key = KeyFor(options, sequence);
        for (CheckRequest& item : request) item.key = key;
        absl::StatusOr<MultiDecision> decision = limiter.CheckAll(request);
        tally.Record(started_ns, NowNanos(), decision.ok(), decision.ok() && decision->allowed,
                     schedule.Measured(started_ns));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// HTTP callers, one thread and one keep-alive connection each. A failed request counts as
// an error and the connection is re-opened.
void RunHttpLoop(const DriverOptions& options, const Workload& workload, Schedule& schedule,
                 Tally& tally) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  const std::vector<std::string> parts = absl::StrSplit(options.target, ':');
  const std::string host = parts.empty() ? "127.0.0.1" : parts[0];
  const std::string port = parts.size() > 1 ? parts[1] : "8080";
  std::vector<std::thread> threads;
  for (int caller = 0; caller < options.callers; ++caller) {
    threads.emplace_back([&] {
      asio::io_context io;
      asio::ip::tcp::resolver resolver(io);
      std::unique_ptr<beast::tcp_stream> stream;
      beast::flat_buffer buffer;
      for (;;) {
        const int64_t started_ns = NowNanos();
        int64_t sequence = 0;
        if (!schedule.Next(started_ns, &sequence)) return;
        const std::string key = KeyFor(options, sequence);
        std::string body;
        if (workload.request.size() == 1) {
          body = absl::StrCat(R"({"limit":")", std::string(workload.request[0].limit.name()),
                              R"(","key":")", key, R"("})");
        } else {
          body = R"({"checks":[)";
          for (size_t i = 0; i < workload.request.size(); ++i) {
            absl::StrAppend(&body, i > 0 ? "," : "", R"({"limit":")",
                            std::string(workload.request[i].limit.name()), R"(","key":")", key,
                            R"("})");
          }
          body += "]}";
        }
        bool ok = false;
        bool allowed = false;
        beast::error_code error;
        if (stream == nullptr) {
          stream = std::make_unique<beast::tcp_stream>(io);
          auto endpoints = resolver.resolve(host, port, error);
          if (!error) stream->connect(endpoints, error);
        }
        if (!error) {
          http::request<http::string_body> request{http::verb::post, "/v1/check", 11};
          request.set(http::field::host, host);
          request.set(http::field::content_type, "application/json");
          request.keep_alive(true);
          request.body() = std::move(body);
          request.prepare_payload();
          http::write(*stream, request, error);
        }
        if (!error) {
          http::response<http::string_body> response;
          http::read(*stream, buffer, response, error);
          if (!error) {
            const unsigned status = response.result_int();
            ok = status == 200 || status == 429;
            allowed = status == 200;
            if (!response.keep_alive()) stream.reset();
          }
        }
        if (error) stream.reset();
        tally.Record(started_ns, NowNanos(), ok, allowed, schedule.Measured(started_ns));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

int Run(const DriverOptions& options) {
  absl::StatusOr<Workload> workload = MakeWorkload(options);
  if (!workload.ok()) {
    std::fprintf(stderr, "compare_driver: %s\n", workload.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<Limiter> limiter;
  if (options.via == "library") {
    absl::StatusOr<std::unique_ptr<Limiter>> created = MakeLimiter(options, *workload);
    if (!created.ok()) {
      std::fprintf(stderr, "compare_driver: %s\n", created.status().ToString().c_str());
      return 1;
    }
    limiter = *std::move(created);
  } else if (options.via != "http") {
    std::fprintf(stderr, "compare_driver: unknown --via %s\n", options.via.c_str());
    return 2;
  }

  Tally tally;
  Schedule schedule(options);
  Outstanding outstanding;
  double cpu_at_start = CpuSeconds();
  int64_t measured_from_ns = NowNanos();
  // Reads the CPU clock when measuring starts (after the warm-up), from its own thread.
  std::thread cpu_marker;
  if (options.warmup_s > 0) {
    cpu_marker = std::thread([&] {
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(schedule.measure_start_ns() - NowNanos()));
      cpu_at_start = CpuSeconds();
      measured_from_ns = NowNanos();
    });
  }

  if (options.via == "http") {
    RunHttpLoop(options, *workload, schedule, tally);
  } else if (options.mode == "sync") {
    RunBlockingLoop(options, *workload, *limiter, schedule, tally);
  } else if (options.rate > 0 && (options.mode == "charge" || options.mode == "lease")) {
    std::fprintf(stderr, "compare_driver: --rate is for checks, not --mode %s\n",
                 options.mode.c_str());
    return 2;
  } else if (options.rate > 0) {
    outstanding.Add();  // the pacing loop itself
    RunOpenLoop(options, *workload, *limiter, schedule, tally, outstanding);
    outstanding.Done();
    outstanding.WaitForZero();
  } else {
    AsyncLoop loop{options, *workload, *limiter, schedule, tally, outstanding};
    for (int caller = 0; caller < options.callers; ++caller) outstanding.Add();
    for (int caller = 0; caller < options.callers; ++caller) loop.Issue();
    outstanding.WaitForZero();
  }
  if (cpu_marker.joinable()) cpu_marker.join();
  const double cpu_s = CpuSeconds() - cpu_at_start;
  const int64_t finished_ns = std::min(NowNanos(), schedule.end_ns());
  tally.Print(static_cast<double>(finished_ns - measured_from_ns) / 1e9, cpu_s);
  limiter.reset();
  return 0;
}

}  // namespace
}  // namespace tollgate::bench

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tollgate::bench::DriverOptions options;
  if (!tollgate::bench::ParseArgs(argc, argv, &options)) {
    tollgate::bench::Usage();
    return 2;
  }
  return tollgate::bench::Run(options);
}
