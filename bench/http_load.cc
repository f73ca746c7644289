// Copyright tollgate authors. A load generator for `POST /v1/check` over HTTP/1.1 keep-alive
// connections (one thread, Boost.Asio), closed loop or paced, for bench/service_bench.sh.
//
//   http_load --target 127.0.0.1:8080 --connections 8 --duration 5 --warmup 1
//       [--rate REQUESTS_PER_SECOND] [--requests N] [--keys 10000] [--limit bench]
//       [--path /v1/check] [--server-pid PID[,PID...]] [--redis-pid PID] [--timeout S]
//
// Keeps one request in flight on each of `--connections` connections: closed loop (the next
// request as soon as the answer is read), or with `--rate` at that total rate, each connection
// paced to rate / connections (a late connection sends at once and does not catch up with a
// burst; at most one request in flight per connection), as bench/grpc_load paces its slots.
// Every request is `{"limit":"<limit>","key":"u<n>"}` with n cycling over `--keys`. Runs for
// `--duration` seconds after `--warmup` seconds, or for `--requests` requests (no warm-up).
// A request counts when it both started and ended in the measured window; latency is from its
// first byte written to its answer's last byte read. 2xx answers count as OK, 429 as
// over-limit, anything else (or a broken connection, which is reopened) as an error.
// With --server-pid / --redis-pid, also reports the CPU time (utime + stime, /proc/PID/stat)
// of those processes over the measured window (a list of server pids is summed: nginx's
// workers). The last line is machine-readable, with the
// field names of bench/grpc_load's: `result calls=... decisions_per_second=... p99_us=...`.
// Exits 0 when no request failed, 1 otherwise, 2 on bad arguments.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"
#include "load_common.h"
#include "process_cpu.h"

namespace {

using tollgate::bench::Pacer;
using tollgate::bench::ParsePids;
using tollgate::bench::Percentile;
using tollgate::bench::ProcessCpuSeconds;
using tollgate::bench::ProcessesCpuSeconds;

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8080";
  std::string path = "/v1/check";
  std::string limit = "bench";
  int64_t keys = 10000;
  int connections = 8;
  double duration_seconds = 5;
  double warmup_seconds = 1;
  int64_t requests = 0;          // > 0: a fixed count instead of a duration (no warm-up)
  double rate = 0;               // requests per second over all connections; 0: closed loop
  std::vector<int> server_pids;  // summed: a server of several processes (nginx's workers)
  int redis_pid = 0;
  double timeout_seconds = 5;
};

[[noreturn]] void Usage(const char* message) {
  std::fprintf(stderr,
               "http_load: %s\nusage: http_load [--target HOST:PORT] [--connections N] "
               "[--duration S] [--warmup S] [--requests N] [--rate R] [--keys N] [--limit L] "
               "[--path P] [--server-pid PID] [--redis-pid PID] [--timeout S]\n",
               message);
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--target") {
      const size_t colon = value.rfind(':');
      if (colon == std::string::npos) Usage("--target needs HOST:PORT");
      options.host = value.substr(0, colon);
      options.port = value.substr(colon + 1);
    } else if (flag == "--connections") {
      options.connections = std::atoi(value.c_str());
    } else if (flag == "--duration") {
      options.duration_seconds = std::atof(value.c_str());
    } else if (flag == "--warmup") {
      options.warmup_seconds = std::atof(value.c_str());
    } else if (flag == "--requests") {
      options.requests = std::atoll(value.c_str());
    } else if (flag == "--rate") {
      options.rate = std::atof(value.c_str());
    } else if (flag == "--keys") {
      options.keys = std::atoll(value.c_str());
    } else if (flag == "--limit") {
      options.limit = value;
    } else if (flag == "--path") {
      options.path = value;
    } else if (flag == "--server-pid") {
      options.server_pids = ParsePids(value);
    } else if (flag == "--redis-pid") {
      options.redis_pid = std::atoi(value.c_str());
    } else if (flag == "--timeout") {
      options.timeout_seconds = std::atof(value.c_str());
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  if (options.connections < 1 || options.keys < 1 || options.duration_seconds <= 0 ||
      options.warmup_seconds < 0 || options.requests < 0 || options.rate < 0 ||
      options.timeout_seconds <= 0) {
    Usage("numbers must be positive");
  }
  if (options.requests > 0) options.warmup_seconds = 0;
  return options;
}

enum class Phase { kWarmup, kMeasure, kStop };

// State shared by the connections; everything runs on the one io_context thread.
struct Run {
  Options options;
  asio::io_context io;
  tcp::resolver::results_type endpoints;
  Phase phase = Phase::kWarmup;
  int64_t started = 0;  // with --requests: requests started
  int active = 0;       // connections not yet finished
  int64_t next_key = 0;
};

struct Stats {
  std::vector<int32_t> latencies_micros;
  int64_t ok = 0;
  int64_t over_limit = 0;
  int64_t errors = 0;
  std::string first_error;
};

// One keep-alive connection with at most one request in flight. Lives until the io_context
// stops (owned by main).
class Connection {
 public:
  Connection(Run& run, int index)
      : run_(run),
        socket_(run.io),
        timer_(run.io),
        pacer_(run.options.rate, run.options.connections, index) {
    stats_.latencies_micros.reserve(1 << 16);
  }

  void Start() { Connect(); }
  Stats& stats() { return stats_; }

 private:
  void Connect() {
    socket_ = tcp::socket(run_.io);
    asio::async_connect(socket_, run_.endpoints,
                        [this](const boost::system::error_code& error, const tcp::endpoint&) {
                          if (error) {
                            Fail("connect: " + error.message());
                            Finish();  // no server: nothing more from this connection
                            return;
                          }
                          socket_.set_option(tcp::no_delay(true));
                          Wait();
                        });
  }

  // Sends the next request now or, with --rate, at its turn.
  void Wait() {
    const std::optional<Clock::time_point> turn = pacer_.Next();
    if (!turn.has_value()) {
      Issue();
      return;
    }
    timer_.expires_at(*turn);
    timer_.async_wait([this](const boost::system::error_code& error) {
      if (!error) Issue();
    });
  }

  void Issue() {
    if (run_.phase == Phase::kStop ||
        (run_.options.requests > 0 && run_.started++ >= run_.options.requests)) {
      Finish();
      return;
    }
    const std::string body = "{\"limit\":\"" + run_.options.limit + "\",\"key\":\"u" +
                             std::to_string(run_.next_key++ % run_.options.keys) + "\"}";
    request_ =
        "POST " + run_.options.path + " HTTP/1.1\r\nHost: " + run_.options.host +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    phase_at_start_ = run_.phase;
    start_ = Clock::now();
    asio::async_write(socket_, asio::buffer(request_),
                      [this](const boost::system::error_code& error, size_t) {
                        if (error) {
                          Broken("write: " + error.message());
                          return;
                        }
                        Read();
                      });
  }

  void Read() {
    if (buffered_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
    socket_.async_read_some(asio::buffer(buffer_.data() + buffered_, buffer_.size() - buffered_),
                            [this](const boost::system::error_code& error, size_t got) {
                              if (error) {
                                Broken("read: " + error.message());
                                return;
                              }
                              buffered_ += got;
                              Parse();
                            });
  }

  // Consumes one answer from the buffer if it is complete; reads on otherwise.
  void Parse() {
    const std::string_view text(buffer_.data(), buffered_);
    const size_t head_end = text.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
      Read();
      return;
    }
    size_t content_length = 0;
    for (size_t line = text.find("\r\n"); line < head_end; line = text.find("\r\n", line + 2)) {
      static constexpr std::string_view kName = "content-length:";
      if (line + 2 + kName.size() <= head_end &&
          strncasecmp(text.data() + line + 2, kName.data(), kName.size()) == 0) {
        content_length = std::strtoull(text.data() + line + 2 + kName.size(), nullptr, 10);
      }
    }
    const size_t total = head_end + 4 + content_length;
    if (buffered_ < total) {
      Read();
      return;
    }
    const int status = text.size() > 12 ? std::atoi(text.data() + 9) : 0;
    std::memmove(buffer_.data(), buffer_.data() + total, buffered_ - total);
    buffered_ -= total;
    if (Counted()) {
      if (status == 429) {
        ++stats_.over_limit;
      } else if (status >= 200 && status < 300) {
        ++stats_.ok;
      } else {
        Fail("HTTP status " + std::to_string(status));
      }
      stats_.latencies_micros.push_back(static_cast<int32_t>(std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count(),
          INT32_MAX)));
    }
    Wait();
  }

  bool Counted() const {
    return phase_at_start_ == Phase::kMeasure &&
           (run_.options.requests > 0 || run_.phase == Phase::kMeasure);
  }

  void Fail(const std::string& what) {
    if (stats_.errors++ == 0) stats_.first_error = what;
  }

  // The connection broke mid-request: counted as an error, then reopened.
  void Broken(const std::string& what) {
    if (Counted() || run_.options.requests > 0) Fail(what);
    boost::system::error_code ignored;
    socket_.close(ignored);
    buffered_ = 0;
    if (run_.phase == Phase::kStop) {
      Finish();
      return;
    }
    Connect();
  }

  void Finish() {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    if (--run_.active == 0) run_.io.stop();
  }

  Run& run_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string request_;
  std::vector<char> buffer_ = std::vector<char>(4096);
  size_t buffered_ = 0;
  Phase phase_at_start_ = Phase::kWarmup;
  Clock::time_point start_;
  Pacer pacer_;  // with --rate, when the next request may start
  bool finished_ = false;
  Stats stats_;
};

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.options = ParseOptions(argc, argv);
  const Options& options = run.options;
  boost::system::error_code error;
  run.endpoints = tcp::resolver(run.io).resolve(options.host, options.port, error);
  if (error) {
    std::fprintf(stderr, "http_load: cannot resolve %s:%s: %s\n", options.host.c_str(),
                 options.port.c_str(), error.message().c_str());
    return 1;
  }

  std::vector<std::unique_ptr<Connection>> connections;
  for (int i = 0; i < options.connections; ++i) {
    connections.push_back(std::make_unique<Connection>(run, i));
  }
  run.active = options.connections;

  double server_cpu_start = -1, redis_cpu_start = -1, server_cpu = -1, redis_cpu = -1;
  double self_cpu_start = 0, self_cpu = 0, elapsed = 0;
  Clock::time_point measure_start;
  const auto begin_window = [&] {
    run.phase = Phase::kMeasure;
    server_cpu_start = ProcessesCpuSeconds(options.server_pids);
    redis_cpu_start = ProcessCpuSeconds(options.redis_pid);
    self_cpu_start = ProcessCpuSeconds(getpid());
    measure_start = Clock::now();
  };
  const auto end_window = [&] {
    elapsed = std::chrono::duration<double>(Clock::now() - measure_start).count();
    if (server_cpu_start >= 0)
      server_cpu = ProcessesCpuSeconds(options.server_pids) - server_cpu_start;
    if (redis_cpu_start >= 0) redis_cpu = ProcessCpuSeconds(options.redis_pid) - redis_cpu_start;
    self_cpu = ProcessCpuSeconds(getpid()) - self_cpu_start;
  };

  asio::steady_timer warmup(run.io), window(run.io), deadline(run.io);
  if (options.requests > 0) {
    begin_window();
  } else {
    warmup.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options.warmup_seconds)));
    warmup.async_wait([&](const boost::system::error_code&) {
      begin_window();
      window.expires_after(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(options.duration_seconds)));
      window.async_wait([&](const boost::system::error_code&) {
        // The window ends now; requests still in flight finish uncounted.
        end_window();
        run.phase = Phase::kStop;
        deadline.expires_after(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(options.timeout_seconds)));
        deadline.async_wait([&](const boost::system::error_code& cancelled) {
          if (cancelled) return;
          std::fprintf(stderr, "http_load: requests still in flight %.0f s after the end\n",
                       options.timeout_seconds);
          std::_Exit(1);
        });
      });
    });
  }
  for (auto& connection : connections) connection->Start();
  run.io.run();
  if (options.requests > 0) end_window();

  std::vector<int32_t> latencies;
  int64_t ok = 0, over_limit = 0, errors = 0;
  std::string first_error;
  for (auto& connection : connections) {
    Stats& stats = connection->stats();
    latencies.insert(latencies.end(), stats.latencies_micros.begin(), stats.latencies_micros.end());
    ok += stats.ok;
    over_limit += stats.over_limit;
    errors += stats.errors;
    if (first_error.empty()) first_error = stats.first_error;
  }
  std::sort(latencies.begin(), latencies.end());
  const int64_t decisions = ok + over_limit;
  const double per_second = elapsed > 0 ? decisions / elapsed : 0;
  std::printf("target %s:%s, %d connections%s\n", options.host.c_str(), options.port.c_str(),
              options.connections, options.rate > 0 ? ", paced" : ", closed loop");
  std::printf("requests %zu in %.2f s: %.0f decisions/s\n", latencies.size(), elapsed, per_second);
  std::printf("answers: ok %" PRId64 ", over_limit %" PRId64 ", errors %" PRId64 "%s%s\n", ok,
              over_limit, errors, first_error.empty() ? "" : " (first: ",
              first_error.empty() ? "" : (first_error + ")").c_str());
  std::printf("latency us: p50 %" PRId64 ", p90 %" PRId64 ", p99 %" PRId64 ", max %" PRId64 "\n",
              Percentile(latencies, 0.5), Percentile(latencies, 0.9), Percentile(latencies, 0.99),
              latencies.empty() ? 0 : static_cast<int64_t>(latencies.back()));
  std::printf("load generator CPU %.2f s\n", self_cpu);
  std::printf("result calls=%zu seconds=%.3f decisions_per_second=%.0f errors=%" PRId64
              " over_limit=%" PRId64
              " server_cpu_seconds=%.3f redis_cpu_seconds=%.3f p50_us=%" PRId64 " p90_us=%" PRId64
              " p99_us=%" PRId64 " max_us=%" PRId64 "\n",
              latencies.size(), elapsed, per_second, errors, over_limit, server_cpu, redis_cpu,
              Percentile(latencies, 0.5), Percentile(latencies, 0.9), Percentile(latencies, 0.99),
              latencies.empty() ? 0 : static_cast<int64_t>(latencies.back()));
  return errors > 0 ? 1 : 0;
}
