// Copyright tollgate authors. A real `tollgate serve` process for integration tests, and a
// minimal HTTP/1.1 client to talk to it.
#ifndef TOLLGATE_TESTS_SUPPORT_SERVE_PROCESS_H_
#define TOLLGATE_TESTS_SUPPORT_SERVE_PROCESS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "boost/asio/io_context.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "tests/support/process.h"

namespace tollgate::testing {

using HttpTestResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Bound on each read or write of the test client.
inline constexpr auto kHttpIoTimeout = std::chrono::seconds(10);
// Sanitizer builds start slowly on a busy machine.
inline constexpr auto kServeStartTimeout = std::chrono::seconds(60);

// The whole file, or "" if it cannot be read.
std::string ReadFileText(const std::string& path);

// The value of header `name`, or "".
std::string HeaderValue(const HttpTestResponse& response, std::string_view name);

// The value of series `series` (a metric name with its labels as rendered, such as
// `x_total{reason="a"}`) in a Prometheus text exposition, or -1 when absent.
int64_t MetricValue(std::string_view exposition, std::string_view series);

// GET /metrics from the server on 127.0.0.1:`port`; "" when it does not answer.
std::string ScrapeMetrics(int port);

// One HTTP/1.1 connection to 127.0.0.1:`port`; requests go one after another on it
// (keep-alive). Not thread-safe: one per thread.
class HttpTestClient {
 public:
  explicit HttpTestClient(int port);

  // Sends one request and reads the response; nullopt if the connection failed.
  std::optional<HttpTestResponse> Send(boost::beast::http::verb method, const std::string& target,
                                       std::string body = "");
  // POST /v1/check.
  std::optional<HttpTestResponse> Check(std::string body);
  // Sends raw bytes and reads one response.
  std::optional<HttpTestResponse> SendRaw(const std::string& bytes);
  // True once the server has closed the connection (reads end of stream).
  bool ClosedByServer();

  boost::beast::tcp_stream& stream() { return stream_; }
  boost::beast::flat_buffer& buffer() { return buffer_; }

 private:
  boost::asio::io_context io_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
};

// A `tollgate serve` with one config file, on ephemeral loopback ports learned from its log.
class ServeProcess {
 public:
  // Writes `config_yaml` to a fresh temporary directory and starts the server with
  // `extra_args`; waits until it logs its HTTP port. nullptr (and a test failure) if it
  // does not.
  // `environment`: "NAME=VALUE" entries added to the server's environment.
  static std::unique_ptr<ServeProcess> Start(const std::string& config_yaml,
                                             const std::vector<std::string>& extra_args = {},
                                             const std::vector<std::string>& environment = {});
  // As Start, with `args` instead of a written config file (the ports and threads are added):
  // e.g. --xds-server without --config. config_path() is then "".
  static std::unique_ptr<ServeProcess> StartWithArgs(
      const std::vector<std::string>& args, const std::vector<std::string>& environment = {});

  // Starts `argv` (a tollgate serve, under any name and with any arguments) with
  // `environment` added, its log in `dir` (a fresh temporary directory when empty), and
  // waits until it logs its HTTP port (its gRPC and metrics ports are read from the log
  // too). nullptr (and a test failure) if it does not.
  static std::unique_ptr<ServeProcess> StartCommand(const std::vector<std::string>& argv,
                                                    const std::vector<std::string>& environment,
                                                    std::string dir = "");

  int port() const { return port_; }
  // The port of --metrics it logged ("listening metrics=HOST:PORT"), or 0.
  int metrics_port() const { return metrics_port_; }
  // The gRPC port it logged ("listening grpc=127.0.0.1:PORT"), or 0 if it logged none.
  int grpc_port() const { return grpc_port_; }
  const std::string& config_path() const { return config_; }
  std::string log() const { return ReadFileText(log_); }
  void Signal(int signal) const { process_->Signal(signal); }
  pid_t pid() const { return process_->pid(); }
  // SIGTERM; returns the exit code.
  int Stop() { return process_->Stop(std::chrono::seconds(30)); }

 private:
  ServeProcess() = default;
  std::string dir_;
  std::string config_;
  std::string log_;
  std::optional<Subprocess> process_;
  int port_ = 0;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_SERVE_PROCESS_H_
