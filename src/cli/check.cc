// Copyright tollgate authors.
#include "src/cli/check.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

std::string Dump(const nlohmann::json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<CheckRequest> BuildCheckRequest(const CheckOptions& options) {
  if (!options.domain.empty()) {
    if (!options.limits.empty() || !options.keys.empty()) {
      return absl::InvalidArgumentError(
          "--domain (Envoy's descriptors) and --limit/--key (tollgate's limits) are two forms: "
          "give one");
    }
    if (options.descriptors.empty()) {
      return absl::InvalidArgumentError("--domain needs at least one --descriptor key=value");
    }
    if (options.costs.size() > 1) {
      return absl::InvalidArgumentError(
          "with --domain, --cost is the request's hits_addend: give it once");
    }
    const bool peek = !options.costs.empty() && options.costs[0] == 0;
    nlohmann::json descriptors = nlohmann::json::array();
    for (const std::string& descriptor : options.descriptors) {
      nlohmann::json entries = nlohmann::json::array();
      for (absl::string_view entry : absl::StrSplit(descriptor, ',')) {
        std::pair<std::string, std::string> key_value =
            absl::StrSplit(entry, absl::MaxSplits('=', 1));
        if (key_value.first.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--descriptor \"", descriptor, "\": expected key=value[,key=value...]"));
        }
        entries.push_back({{"key", key_value.first}, {"value", key_value.second}});
      }
      nlohmann::json item = {{"entries", entries}};
      // The request's hits_addend 0 means unset (1); a descriptor's explicit 0 (Envoy >= 1.33)
      // checks without counting: a peek.
      if (peek) item["hits_addend"] = 0;
      descriptors.push_back(std::move(item));
    }
    nlohmann::json body = {{"domain", options.domain}, {"descriptors", descriptors}};
    if (!options.costs.empty() && !peek) body["hits_addend"] = options.costs[0];
    return CheckRequest{"/json", Dump(body)};
  }

  if (!options.descriptors.empty()) {
    return absl::InvalidArgumentError("--descriptor needs --domain");
  }
  const size_t n = options.limits.size();
  if (n == 0) {
    return absl::InvalidArgumentError(
        "give --limit NAME --key KEY (repeat --limit for several limits at once), or --domain "
        "with --descriptor");
  }
  if (options.keys.size() != 1 && options.keys.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--key: give one (for every limit) or one per --limit (", n, "), got ",
                     options.keys.size()));
  }
  if (options.costs.size() > 1 && options.costs.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cost: give none (1 each), one (for every limit) or one per --limit (", n,
                     "), got ", options.costs.size()));
  }
  auto item = [&](size_t i) {
    const std::string& key = options.keys.size() == 1 ? options.keys[0] : options.keys[i];
    const int64_t cost = options.costs.empty()       ? 1
                         : options.costs.size() == 1 ? options.costs[0]
                                                     : options.costs[i];
    return nlohmann::json{{"limit", options.limits[i]}, {"key", key}, {"cost", cost}};
  };
  if (n == 1) return CheckRequest{"/v1/check", Dump(item(0))};
  nlohmann::json checks = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) checks.push_back(item(i));
  return CheckRequest{"/v1/check", Dump({{"checks", checks}})};
}

int RunCheck(const CheckOptions& options) {
  absl::StatusOr<CheckRequest> check = BuildCheckRequest(options);
  if (!check.ok()) {
    std::fprintf(stderr, "%s\n", std::string(check.status().message()).c_str());
    return 2;
  }
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

  http::request<http::string_body> request(http::verb::post, check->path, 11);
  request.set(http::field::host, beast::string_view(url.data(), url.size()));
  request.set(http::field::content_type, "application/json");
  request.body() = check->body;
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
  for (std::string_view name : {"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Limit",
                                "X-RateLimit-Remaining", "X-RateLimit-Reset"}) {
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
