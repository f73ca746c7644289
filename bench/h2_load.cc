// Copyright tollgate authors. A light load generator for Envoy's rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over HTTP/2 on libnghttp2, in
// one thread (Boost.Asio), for bench/service_bench.sh. Envoy's own client is an nghttp2-style
// codec, not gRPC C++; bench/grpc_load (gRPC C++) spends several times the CPU per call of the
// servers it measures, which on a 2-core machine makes it the bottleneck of the latency rows.
//
//   h2_load --target 127.0.0.1:8081 --domain bench --key user --keys 10000
//       --concurrency 64 --channels 2 --duration 5 --warmup 1 [--rate CALLS_PER_SECOND]
//       [--requests N] [--descriptors N] [--value-prefix P] [--server-pid PID[,PID...]]
//       [--redis-pid PID] [--timeout S]
//
// The flags, the pacing and the report are bench/grpc_load's: `--concurrency` slots, each one
// call at a time, spread round-robin over `--channels` HTTP/2 connections; closed loop (a
// slot's next call as soon as its answer is read), or with `--rate` at that total rate, each
// slot paced to rate / concurrency (a late slot starts at once and does not catch up with a
// burst). Each call carries `--descriptors` descriptors (key, "<prefix><n>"), n drawn
// uniformly from `--keys`. A call counts when it both started and ended in the measured
// window; its latency is from its request's submission to its stream's close. HTTP 200 with
// grpc-status 0 counts as OK or OVER_LIMIT (the answer's overall_code); anything else (a
// reset stream, another status, a call past `--timeout`) as an error. The last line is
// machine-readable: `result calls=... decisions_per_second=... p50_us=... p99_us=...`.
// Exits 0 when no call failed, 1 otherwise, 2 on bad arguments.
#include <nghttp2/nghttp2.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "load_common.h"
#include "process_cpu.h"

namespace {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using tollgate::bench::MeasuredWindow;
using tollgate::bench::Pacer;
using tollgate::bench::ParseRlsLoadOptions;
using tollgate::bench::PrintRlsLoadReport;
using tollgate::bench::RlsLoadOptions;
using tollgate::bench::RlsLoadResult;

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr char kPath[] = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

enum class Phase { kWarmup, kMeasure, kStop };

class Connection;

// Everything the slots share: the options, the phase, the counts.
struct Run {
  RlsLoadOptions options;
  std::string host;
  std::string port;
  asio::io_context io;
  Phase phase = Phase::kWarmup;
  int64_t started = 0;  // with --requests: calls started
  int active_slots = 0;
  RlsLoadResult result;
  std::mt19937_64 random{20261204};
};

// One call at a time: its request body, what came back, and (with --rate) its next turn.
class Slot {
 public:
  Slot(Run& run, Connection& connection, int index)
      : run_(run),
        connection_(connection),
        timer_(run.io),
        pacer_(run.options.rate, run.options.concurrency, index) {}

  void Start() { Wait(); }

  // nghttp2's callbacks for this slot's stream.
  void OnHeader(std::string_view name, std::string_view value) {
    if (name == ":status") {
      http_status_ = std::string(value);
    } else if (name == "grpc-status") {
      grpc_status_ = std::string(value);
    } else if (name == "grpc-message") {
      grpc_message_ = std::string(value);
    }
  }
  void OnData(const uint8_t* data, size_t size) {
    response_.append(reinterpret_cast<const char*>(data), size);
  }
  // Copies up to `length` bytes of the request body into `out`.
  size_t ReadBody(uint8_t* out, size_t length, uint32_t* flags) {
    const size_t n = std::min(length, body_.size() - body_sent_);
    std::memcpy(out, body_.data() + body_sent_, n);
    body_sent_ += n;
    if (body_sent_ == body_.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return n;
  }
  void OnClose(uint32_t error_code);
  // The connection broke, or its call outlived --timeout: the call ends as an error.
  void Fail(const std::string& why) {
    in_flight_ = false;
    Record(why);
    Wait();
  }
  bool in_flight() const { return in_flight_; }
  Clock::time_point started_at() const { return start_; }

 private:
  void Wait();
  void Issue();
  // The call just ended: `error` empty for an answer, else why it failed.
  void Record(const std::string& error);

  Run& run_;
  Connection& connection_;
  asio::steady_timer timer_;
  std::string body_;
  size_t body_sent_ = 0;
  std::string response_;
  std::string http_status_;
  std::string grpc_status_;
  std::string grpc_message_;
  bool in_flight_ = false;
  Phase phase_at_start_ = Phase::kWarmup;
  Clock::time_point start_;
  Pacer pacer_;  // with --rate, when the next call may start
};

// One HTTP/2 connection (an nghttp2 client session on one socket) and the slots on it.
class Connection {
 public:
  explicit Connection(Run& run)
      : run_(run), authority_(run.host + ":" + run.port), socket_(run.io) {}
  ~Connection() {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }

  bool Open() {
    boost::system::error_code error;
    tcp::resolver resolver(run_.io);
    asio::connect(socket_, resolver.resolve(run_.host, run_.port), error);
    if (error) {
      std::fprintf(stderr, "h2_load: cannot connect to %s:%s: %s\n", run_.host.c_str(),
                   run_.port.c_str(), error.message().c_str());
      return false;
    }
    socket_.set_option(tcp::no_delay(true));
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(
        callbacks, [](nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t /*flags*/,
                      void* /*user_data*/) {
          auto* slot = static_cast<Slot*>(
              nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
          if (slot != nullptr) {
            slot->OnHeader({reinterpret_cast<const char*>(name), namelen},
                           {reinterpret_cast<const char*>(value), valuelen});
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        callbacks, [](nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id,
                      const uint8_t* data, size_t len, void* /*user_data*/) {
          auto* slot = static_cast<Slot*>(nghttp2_session_get_stream_user_data(session, stream_id));
          if (slot != nullptr) slot->OnData(data, len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        callbacks,
        [](nghttp2_session* session, int32_t stream_id, uint32_t error_code, void* /*user_data*/) {
          auto* slot = static_cast<Slot*>(nghttp2_session_get_stream_user_data(session, stream_id));
          if (slot != nullptr) slot->OnClose(error_code);
          return 0;
        });
    const int made = nghttp2_session_client_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    if (made != 0) return false;
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
    };
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2);
    Read();
    Flush();
    return true;
  }

  // Submits `slot`'s request (its body read through Slot::ReadBody) and sends it.
  bool Submit(Slot& slot) {
    auto header = [](const char* name, const char* value, size_t value_length) {
      return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                        reinterpret_cast<uint8_t*>(const_cast<char*>(value)), std::strlen(name),
                        value_length, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
    };
    const nghttp2_nv headers[] = {
        header(":method", "POST", 4),
        header(":scheme", "http", 4),
        header(":path", kPath, sizeof(kPath) - 1),
        header(":authority", authority_.data(), authority_.size()),
        header("content-type", "application/grpc", 16),
        header("te", "trailers", 8),
    };
    nghttp2_data_provider body;
    body.source.ptr = &slot;
    body.read_callback = [](nghttp2_session* /*session*/, int32_t /*stream_id*/, uint8_t* buf,
                            size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                            void* /*user_data*/) -> ssize_t {
      return static_cast<ssize_t>(
          static_cast<Slot*>(source->ptr)->ReadBody(buf, length, data_flags));
    };
    if (broken_ || nghttp2_submit_request(session_, nullptr, headers, 6, &body, &slot) < 0) {
      return false;
    }
    Flush();
    return true;
  }

  void Add(Slot* slot) { slots_.push_back(slot); }
  void Close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

 private:
  void Read() {
    socket_.async_read_some(
        asio::buffer(input_), [this](boost::system::error_code error, size_t n) {
          if (error) {
            Break(error.message());
            return;
          }
          if (nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(input_.data()),
                                       n) < 0) {
            Break("HTTP/2 protocol error");
            return;
          }
          Flush();
          Read();
        });
  }

  // Writes what the session has to send; one write at a time, the rest after it.
  void Flush() {
    if (writing_ || broken_) return;
    output_.clear();
    for (;;) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) break;
      output_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (output_.empty()) return;
    writing_ = true;
    asio::async_write(socket_, asio::buffer(output_),
                      [this](boost::system::error_code error, size_t /*n*/) {
                        writing_ = false;
                        if (error) {
                          Break(error.message());
                          return;
                        }
                        Flush();
                      });
  }

  // The connection is unusable: its calls in flight fail (slots do not issue on it again).
  void Break(const std::string& why) {
    if (broken_) return;
    broken_ = true;
    for (Slot* slot : slots_) {
      if (slot->in_flight()) slot->Fail("connection: " + why);
    }
  }

  Run& run_;
  const std::string authority_;
  tcp::socket socket_;
  nghttp2_session* session_ = nullptr;
  std::array<char, 1 << 16> input_{};
  std::string output_;
  bool writing_ = false;
  bool broken_ = false;
  std::vector<Slot*> slots_;
};

void Slot::Wait() {
  const std::optional<Clock::time_point> turn = pacer_.Next();
  if (!turn.has_value()) {
    Issue();
    return;
  }
  timer_.expires_at(*turn);
  timer_.async_wait([this](boost::system::error_code error) {
    if (!error) Issue();
  });
}

void Slot::Issue() {
  if (run_.phase == Phase::kStop ||
      (run_.options.requests > 0 && run_.started++ >= run_.options.requests)) {
    if (--run_.active_slots == 0) run_.io.stop();
    return;
  }
  RateLimitRequest request;
  request.set_domain(run_.options.domain);
  std::uniform_int_distribution<int64_t> pick(0, run_.options.keys - 1);
  for (int i = 0; i < run_.options.descriptors; ++i) {
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key(i == 0 ? run_.options.key : run_.options.key + std::to_string(i));
    entry->set_value(run_.options.value_prefix + std::to_string(pick(run_.random)));
  }
  const size_t size = request.ByteSizeLong();
  body_.assign(5, '\0');  // gRPC's message prefix: not compressed, then the length
  for (int i = 0; i < 4; ++i) body_[1 + i] = static_cast<char>((size >> (8 * (3 - i))) & 0xff);
  request.AppendToString(&body_);
  body_sent_ = 0;
  response_.clear();
  http_status_.clear();
  grpc_status_.clear();
  grpc_message_.clear();
  phase_at_start_ = run_.phase;
  start_ = Clock::now();
  in_flight_ = true;
  if (!connection_.Submit(*this)) {
    in_flight_ = false;
    Record("connection closed");
    // Slots of a broken connection stop: retrying at once would spin.
    if (--run_.active_slots == 0) run_.io.stop();
  }
}

void Slot::OnClose(uint32_t error_code) {
  if (!in_flight_) return;
  in_flight_ = false;
  std::string error;
  if (error_code != 0) {
    error = "stream reset, HTTP/2 error " + std::to_string(error_code);
  } else if (http_status_ != "200") {
    error = "HTTP status " + (http_status_.empty() ? std::string("none") : http_status_);
  } else if (grpc_status_ != "0") {
    error = "grpc-status " + (grpc_status_.empty() ? std::string("none") : grpc_status_) + " " +
            grpc_message_;
  } else if (response_.size() < 5) {
    error = "no answer message";
  }
  Record(error);
  Wait();
}

void Slot::Record(const std::string& error) {
  const int64_t micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  // Counted only when the call both started and ended inside the measured window.
  if (phase_at_start_ != Phase::kMeasure ||
      (run_.options.requests == 0 && run_.phase != Phase::kMeasure)) {
    return;
  }
  std::string why = error;
  RateLimitResponse answer;
  if (why.empty() &&
      !answer.ParseFromArray(response_.data() + 5, static_cast<int>(response_.size() - 5))) {
    why = "an answer that does not parse";
  }
  run_.result.Record(micros, why,
                     why.empty() && answer.overall_code() == RateLimitResponse::OVER_LIMIT);
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.options = ParseRlsLoadOptions(argc, argv, "h2_load", /*threads_flag=*/false);
  const RlsLoadOptions& options = run.options;
  const size_t colon = options.target.rfind(':');
  run.host = options.target.substr(0, colon);
  run.port = options.target.substr(colon + 1);

  std::vector<std::unique_ptr<Connection>> connections;
  for (int i = 0; i < options.channels; ++i) {
    connections.push_back(std::make_unique<Connection>(run));
    if (!connections.back()->Open()) return 1;
  }
  std::vector<std::unique_ptr<Slot>> slots;
  for (int i = 0; i < options.concurrency; ++i) {
    Connection& connection = *connections[i % connections.size()];
    slots.push_back(std::make_unique<Slot>(run, connection, i));
    connection.Add(slots.back().get());
  }
  if (options.requests > 0) run.phase = Phase::kMeasure;
  run.active_slots = options.concurrency;

  RlsLoadResult& result = run.result;
  MeasuredWindow window(options);
  const auto start_measuring = [&] {
    run.phase = Phase::kMeasure;
    window.Start();
  };
  const auto stop_measuring = [&] { window.Stop(result); };

  // The phases, and a watchdog: a call older than --timeout fails (its slot goes on).
  asio::steady_timer warmup_end(run.io), window_end(run.io), watchdog(run.io);
  if (options.requests == 0) {
    warmup_end.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options.warmup_seconds)));
    warmup_end.async_wait([&](boost::system::error_code) {
      start_measuring();
      window_end.expires_after(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(options.duration_seconds)));
      window_end.async_wait([&](boost::system::error_code) {
        stop_measuring();
        // The window is over; calls still in flight finish uncounted.
        run.phase = Phase::kStop;
      });
    });
  } else {
    start_measuring();
  }
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.timeout_seconds));
  std::function<void()> watch = [&] {
    watchdog.expires_after(std::chrono::milliseconds(100));
    watchdog.async_wait([&](boost::system::error_code error) {
      if (error) return;
      const Clock::time_point now = Clock::now();
      for (auto& slot : slots) {
        if (slot->in_flight() && now - slot->started_at() > timeout) slot->Fail("timed out");
      }
      watch();
    });
  };
  watch();
  for (auto& slot : slots) slot->Start();
  run.io.run();
  if (options.requests > 0) stop_measuring();
  for (auto& connection : connections) connection->Close();

  std::sort(result.latencies_micros.begin(), result.latencies_micros.end());
  PrintRlsLoadReport(options, result);
  return result.errors > 0 ? 1 : 0;
}
