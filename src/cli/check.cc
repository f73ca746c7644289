// Copyright tollgate authors.
#include "src/cli/check.h"

#include <chrono>
#include <cstdio>
#include <string_view>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "nlohmann/json.hpp"
#include "src/server/listen_address.h"

namespace tollgate::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

constexpr std::chrono::seconds kTimeout(5);

}  // namespace

int RunCheck(const CheckOptions& options) {
  std::string_view url = options.url;
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    std::fprintf(stderr, "--url: expected http://HOST:PORT, got \"%s\"\n", options.url.c_str());
    return 2;
  }
  url.remove_prefix(kScheme.size());
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  absl::StatusOr<server::ListenAddress> address = server::ParseListenAddress(url);
  if (!address.ok()) {
    std::fprintf(stderr, "--url: %s\n", std::string(address.status().message()).c_str());
    return 2;
  }

  nlohmann::json body = {{"limit", options.limit}, {"key", options.key}, {"cost", options.cost}};
  http::request<http::string_body> request(http::verb::post, "/v1/check", 11);
  request.set(http::field::host, beast::string_view(url.data(), url.size()));
  request.set(http::field::content_type, "application/json");
  request.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.prepare_payload();

  beast::error_code error;
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(address->host, std::to_string(address->port), error);
  beast::tcp_stream stream(io);
  http::response<http::string_body> response;
  beast::flat_buffer buffer;
  if (!error) {
    stream.expires_after(kTimeout);
    stream.connect(endpoints, error);
  }
  if (!error) http::write(stream, request, error);
  if (!error) http::read(stream, buffer, response, error);
  if (error) {
    std::fprintf(stderr, "%s: %s\n", options.url.c_str(), error.message().c_str());
    return 2;
  }
  beast::error_code ignored;
  stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);

  std::printf("%u %s\n", response.result_int(), std::string(response.reason()).c_str());
  for (std::string_view name : {"RateLimit-Policy", "RateLimit", "Retry-After"}) {
    auto field = response.find(beast::string_view(name.data(), name.size()));
    if (field != response.end()) {
      std::printf("%s: %s\n", std::string(name).c_str(), std::string(field->value()).c_str());
    }
  }
  std::fputs(response.body().c_str(), stdout);
  switch (response.result()) {
    case http::status::ok:
      return 0;
    case http::status::too_many_requests:
    case http::status::service_unavailable:
      return 1;
    default:
      return 2;
  }
}

}  // namespace tollgate::cli
