// Copyright tollgate authors.
#include "tests/support/serve_process.h"

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/write.hpp"
#include "gtest/gtest.h"

namespace tollgate::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string HeaderValue(const HttpTestResponse& response, std::string_view name) {
  auto field = response.find(beast::string_view(name.data(), name.size()));
  return field == response.end() ? "" : std::string(field->value());
}

int64_t MetricValue(std::string_view exposition, std::string_view series) {
  size_t start = 0;
  while (start < exposition.size()) {
    size_t end = exposition.find('\n', start);
    if (end == std::string_view::npos) end = exposition.size();
    const std::string_view line = exposition.substr(start, end - start);
    if (line.size() > series.size() && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      return std::stoll(std::string(line.substr(series.size() + 1)));
    }
    start = end + 1;
  }
  return -1;
}

std::string ScrapeMetrics(int port) {
  HttpTestClient client(port);
  std::optional<HttpTestResponse> response = client.Send(http::verb::get, "/metrics");
  return response ? response->body() : "";
}

HttpTestClient::HttpTestClient(int port) : stream_(io_) {
  stream_.expires_after(kHttpIoTimeout);
  beast::error_code error;
  stream_.socket().connect(
      net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
      error);
}

std::optional<HttpTestResponse> HttpTestClient::Send(http::verb method, const std::string& target,
                                                     std::string body) {
  http::request<http::string_body> request(method, target, 11);
  request.set(http::field::host, "127.0.0.1");
  if (!body.empty()) request.set(http::field::content_type, "application/json");
  request.body() = std::move(body);
  request.prepare_payload();
  beast::error_code error;
  stream_.expires_after(kHttpIoTimeout);
  http::write(stream_, request, error);
  if (error) return std::nullopt;
  HttpTestResponse response;
  http::read(stream_, buffer_, response, error);
  if (error) return std::nullopt;
  return response;
}

std::optional<HttpTestResponse> HttpTestClient::Check(std::string body) {
  return Send(http::verb::post, "/v1/check", std::move(body));
}

std::optional<HttpTestResponse> HttpTestClient::SendRaw(const std::string& bytes) {
  beast::error_code error;
  stream_.expires_after(kHttpIoTimeout);
  net::write(stream_, net::buffer(bytes), error);
  if (error) return std::nullopt;
  HttpTestResponse response;
  http::read(stream_, buffer_, response, error);
  if (error) return std::nullopt;
  return response;
}

bool HttpTestClient::ClosedByServer() {
  beast::error_code error;
  stream_.expires_after(kHttpIoTimeout);
  char byte;
  stream_.read_some(net::buffer(&byte, 1), error);
  return error == net::error::eof || error == net::error::connection_reset;
}

namespace {

// `tollgate serve` on ephemeral loopback ports with two I/O threads, then `args`.
std::vector<std::string> ServeArgv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TOLLGATE_BINARY, "serve",       "--http",    "127.0.0.1:0",
                                   "--grpc",        "127.0.0.1:0", "--threads", "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace

std::unique_ptr<ServeProcess> ServeProcess::Start(const std::string& config_yaml,
                                                  const std::vector<std::string>& extra_args,
                                                  const std::vector<std::string>& environment) {
  const std::string dir = MakeTempDir("tollgate-serve");
  const std::string config = dir + "/limits.yaml";
  WriteFile(config, config_yaml);
  std::vector<std::string> args = {"--config", config};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::unique_ptr<ServeProcess> server = StartCommand(ServeArgv(args), environment, dir);
  if (server != nullptr) server->config_ = config;
  return server;
}

std::unique_ptr<ServeProcess> ServeProcess::StartWithArgs(
    const std::vector<std::string>& args, const std::vector<std::string>& environment) {
  return StartCommand(ServeArgv(args), environment);
}

std::unique_ptr<ServeProcess> ServeProcess::StartCommand(
    const std::vector<std::string>& argv, const std::vector<std::string>& environment,
    std::string dir) {
  auto server = std::unique_ptr<ServeProcess>(new ServeProcess);
  server->dir_ = dir.empty() ? MakeTempDir("tollgate-serve") : std::move(dir);
  server->log_ = server->dir_ + "/serve.log";
  absl::StatusOr<Subprocess> process = Subprocess::Start(argv, server->log_, environment);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return nullptr;
  server->process_.emplace(*std::move(process));

  // serve logs its gRPC port, then its HTTP port (then its metrics port), once all are bound.
  const std::regex listening(R"(listening http=[^\s]*:(\d+))");
  const std::regex listening_grpc(R"(listening grpc=[^\s]*:(\d+))");
  const std::regex listening_metrics(R"(listening metrics=[^\s]*:(\d+))");
  auto deadline = std::chrono::steady_clock::now() + kServeStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    std::string log = ReadFileText(server->log_);
    if (std::regex_search(log, match, listening)) {
      server->port_ = std::stoi(match[1]);
      if (std::regex_search(log, match, listening_grpc)) server->grpc_port_ = std::stoi(match[1]);
      if (std::regex_search(log, match, listening_metrics)) {
        server->metrics_port_ = std::stoi(match[1]);
      }
      return server;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "server did not report its port; log:\n" << ReadFileText(server->log_);
  return nullptr;
}

}  // namespace tollgate::testing
