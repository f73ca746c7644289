// Copyright tollgate authors. tiffin-load: plays one scripted user through the load balancer.
//
//   tiffin-load --target 127.0.0.1:8000 --path /menu --header "X-User: alice"
//               --rate 60 --duration-s 10 [--threads 4] [--servers-out servers.csv]
//               [--align-second 1]
//
// Sends requests open loop at `--rate` per second for `--duration-s` seconds (request i is
// due at i / rate), over keep-alive connections, one per worker thread. A request late
// because every worker was busy is sent as soon as one is free. Each answer counts in the
// second the server decided it in: the app's X-Decided-At header (wall-clock microseconds
// taken right after its limiter answered), relative to the start; an answer without it
// counts in the second it was sent in. --align-second 1 is for a limit with 1 s fixed
// windows (aligned to the epoch): the run starts on a whole wall-clock second and each
// answer counts in the window that decided it, the one ending at the app's X-Reset-At
// (rounded to the whole second, so a reply that took up to half a second to reach the app
// still counts in the window Redis or the sync store decided it in). Prints one CSV row
// per second on stdout (more rows than the
// duration's seconds when answers were decided after it):
//   second,offered,allowed,refused,unavailable,errors,tokens
// allowed is HTTP 200, refused 429, unavailable 503, errors anything else (connection
// failures, timeouts, other statuses). With --servers-out, writes per answering server
// (the X-Server header) how many requests it answered, allowed and refused: the balancer's
// skew. A seventh column, tokens, sums the X-Tokens header of the allowed answers (the
// tokens an LLM gateway charged for them: the app's /chat). Loopback targets only; the request
// count is bounded by rate x duration and the run by duration + 5 s.
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct LoadOptions {
  std::string host = "127.0.0.1";
  std::string port;
  std::string path = "/menu";
  std::vector<std::pair<std::string, std::string>> headers;
  double rate_per_second = 10;
  double duration_s = 10;
  int threads = 4;
  std::string servers_out;
  bool align_second = false;
};

// What one request got back.
struct Answer {
  int status = 0;  // 0: transport failure
  std::string server;
  int64_t decided_at_micros = 0;  // 0: no X-Decided-At
  int64_t reset_at_micros = 0;    // 0: no X-Reset-At
  int64_t tokens = 0;             // X-Tokens, 0 when absent
};

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Counts of one second.
struct SecondCounts {
  int64_t offered = 0;
  int64_t allowed = 0;
  int64_t refused = 0;
  int64_t unavailable = 0;
  int64_t errors = 0;
  int64_t tokens = 0;
};

struct ServerCounts {
  int64_t answered = 0;
  int64_t allowed = 0;
  int64_t refused = 0;
};

// Results of every worker, under one mutex: at demo rates (hundreds a second) contention
// is negligible.
struct Results {
  std::mutex mu;
  std::vector<SecondCounts> seconds;
  std::map<std::string, ServerCounts> servers;
};

bool ParseFlags(int argc, char** argv, LoadOptions& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (flag == "--target") {
      const size_t colon = value.rfind(':');
      if (colon == std::string::npos) return false;
      options.host = value.substr(0, colon);
      options.port = value.substr(colon + 1);
    } else if (flag == "--path") {
      options.path = value;
    } else if (flag == "--header") {
      std::pair<std::string, std::string> header = absl::StrSplit(value, absl::MaxSplits(':', 1));
      header.second = std::string(absl::StripAsciiWhitespace(header.second));
      options.headers.push_back(std::move(header));
    } else if (flag == "--rate") {
      if (!absl::SimpleAtod(value, &options.rate_per_second)) return false;
    } else if (flag == "--duration-s") {
      if (!absl::SimpleAtod(value, &options.duration_s)) return false;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &options.threads)) return false;
    } else if (flag == "--servers-out") {
      options.servers_out = value;
    } else if (flag == "--align-second") {
      if (value != "0" && value != "1") return false;
      options.align_second = value == "1";
    } else {
      std::fprintf(stderr, "tiffin-load: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  // Loopback only: this tool floods whatever it is pointed at.
  if (options.host != "127.0.0.1" && options.host != "localhost") {
    std::fprintf(stderr, "tiffin-load: --target must be on 127.0.0.1\n");
    return false;
  }
  return !options.port.empty() && options.rate_per_second > 0 && options.duration_s > 0 &&
         options.duration_s <= 3600 && options.threads >= 1 && options.threads <= 64;
}

// One worker's keep-alive connection; reconnects after any failure.
class Connection {
 public:
  explicit Connection(const LoadOptions& options) : options_(options), socket_(io_) {}

  // Sends one request and reads its answer.
  Answer Send() {
    beast::error_code error;
    if (!socket_.is_open() && !Connect()) return {};
    http::request<http::empty_body> request{http::verb::get, options_.path, 11};
    request.set(http::field::host, options_.host);
    for (const auto& [name, value] : options_.headers) request.set(name, value);
    request.keep_alive(true);
    http::write(socket_, request, error);
    http::response<http::string_body> response;
    if (!error) http::read(socket_, buffer_, response, error);
    if (error) {
      Close();
      return {};
    }
    Answer answer;
    answer.status = static_cast<int>(response.result_int());
    if (auto it = response.find("X-Server"); it != response.end()) {
      answer.server.assign(it->value().data(), it->value().size());
    }
    auto int_header = [&](std::string_view name, int64_t* out) {
      auto it = response.find(beast::string_view(name.data(), name.size()));
      if (it == response.end() ||
          !absl::SimpleAtoi(absl::string_view(it->value().data(), it->value().size()), out)) {
        *out = 0;
      }
    };
    int_header("X-Decided-At", &answer.decided_at_micros);
    int_header("X-Reset-At", &answer.reset_at_micros);
    int_header("X-Tokens", &answer.tokens);
    if (!response.keep_alive()) Close();
    return answer;
  }

 private:
  bool Connect() {
    beast::error_code error;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(options_.host, options_.port, error);
    if (error) return false;
    asio::connect(socket_, endpoints, error);
    if (error) {
      Close();
      return false;
    }
    // Bounded waits: a wedged server costs at most this per request.
    timeval timeout{.tv_sec = 3, .tv_usec = 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    return true;
  }

  void Close() {
    beast::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
  }

  const LoadOptions& options_;
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

}  // namespace

int main(int argc, char** argv) {
  LoadOptions options;
  if (!ParseFlags(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: tiffin-load --target 127.0.0.1:PORT [--path /menu] "
                 "[--header 'X-User: alice']... --rate PER_SECOND --duration-s SECONDS "
                 "[--threads N] [--servers-out FILE] [--align-second 0|1]\n");
    return 2;
  }
  const int64_t total = std::llround(options.rate_per_second * options.duration_s);
  const int64_t interval_ns = std::llround(1e9 / options.rate_per_second);
  const int seconds = static_cast<int>(std::ceil(options.duration_s));
  Results results;
  // Rows past the run's last second hold answers decided late (the app was behind); a
  // request is sent by give_up below and waits at most 3 s for its answer.
  const int max_rows = seconds + 9;
  results.seconds.resize(max_rows);
  std::atomic<int64_t> next{0};
  if (options.align_second) {
    const int64_t now_us = WallMicros();
    std::this_thread::sleep_for(std::chrono::microseconds(1'000'000 - now_us % 1'000'000));
  }
  const Clock::time_point start = Clock::now();
  int64_t start_wall_us = WallMicros();
  if (options.align_second) start_wall_us -= start_wall_us % 1'000'000;
  const Clock::time_point give_up =
      start + std::chrono::milliseconds(std::llround(options.duration_s * 1000) + 5000);

  std::vector<std::thread> workers;
  workers.reserve(options.threads);
  for (int t = 0; t < options.threads; ++t) {
    workers.emplace_back([&] {
      Connection connection(options);
      for (;;) {
        const int64_t i = next.fetch_add(1);
        if (i >= total) return;
        const std::chrono::nanoseconds due_offset(i * interval_ns);
        std::this_thread::sleep_until(start + due_offset);
        if (Clock::now() > give_up) return;
        // Counted in the second it was decided in (else sent in), not the one it was due
        // in: a request sent late is decided late, and counting it in its due second would
        // move admissions of one window into the previous one.
        const int64_t sent_offset_us =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
        auto [status, server, decided_at_us, reset_at_us, tokens] = connection.Send();
        int64_t row = sent_offset_us / 1'000'000;
        if (options.align_second && reset_at_us > 0) {
          row = (reset_at_us - start_wall_us + 500'000) / 1'000'000 - 1;
        } else if (decided_at_us > 0) {
          row = (decided_at_us - start_wall_us) / 1'000'000;
        }
        const int second =
            static_cast<int>(std::clamp<int64_t>(row, 0, static_cast<int64_t>(max_rows) - 1));
        std::lock_guard<std::mutex> lock(results.mu);
        SecondCounts& counts = results.seconds[second];
        ++counts.offered;
        if (status == 200) {
          ++counts.allowed;
          counts.tokens += tokens;
        } else if (status == 429) {
          ++counts.refused;
        } else if (status == 503) {
          ++counts.unavailable;
        } else {
          ++counts.errors;
        }
        if (!server.empty()) {
          ServerCounts& by_server = results.servers[server];
          ++by_server.answered;
          if (status == 200) ++by_server.allowed;
          if (status == 429 || status == 503) ++by_server.refused;
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();

  std::printf("second,offered,allowed,refused,unavailable,errors,tokens\n");
  int rows = seconds;
  for (int s = seconds; s < max_rows; ++s) {
    if (results.seconds[s].offered > 0) rows = s + 1;
  }
  for (int s = 0; s < rows; ++s) {
    const SecondCounts& c = results.seconds[s];
    std::printf("%d,%lld,%lld,%lld,%lld,%lld,%lld\n", s, static_cast<long long>(c.offered),
                static_cast<long long>(c.allowed), static_cast<long long>(c.refused),
                static_cast<long long>(c.unavailable), static_cast<long long>(c.errors),
                static_cast<long long>(c.tokens));
  }
  if (!options.servers_out.empty()) {
    std::FILE* out = std::fopen(options.servers_out.c_str(), "w");
    if (out == nullptr) {
      std::perror(options.servers_out.c_str());
      return 1;
    }
    std::fprintf(out, "server,answered,allowed,refused\n");
    for (const auto& [server, c] : results.servers) {
      std::fprintf(out, "%s,%lld,%lld,%lld\n", server.c_str(), static_cast<long long>(c.answered),
                   static_cast<long long>(c.allowed), static_cast<long long>(c.refused));
    }
    std::fclose(out);
  }
  return 0;
}
