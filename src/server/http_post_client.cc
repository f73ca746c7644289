// Copyright tollgate authors.
#include "src/server/http_post_client.h"

#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"
#include "src/core/absl_view.h"
#include "src/server/listen_address.h"

namespace tollgate::server {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

// Bound on an answer's body (the exporter reads it only to keep the connection usable).
constexpr size_t kMaxAnswerBodyBytes = 64 * 1024;

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url) {
  auto invalid = [url](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid URL \"", AbslView(url), "\": ", AbslView(why)));
  };
  constexpr std::string_view kScheme = "http://";
  if (!absl::StartsWithIgnoreCase(AbslView(url), AbslView(kScheme))) {
    if (absl::StartsWithIgnoreCase(AbslView(url), "https://")) {
      return invalid("https is not supported; give a collector's http:// address");
    }
    return invalid("expected http://HOST[:PORT][/PATH]");
  }
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find('#') != std::string_view::npos) return invalid("a URL to POST to has no fragment");
  const size_t path_start = rest.find_first_of("/?");
  const std::string_view authority = rest.substr(0, path_start);
  if (authority.find('@') != std::string_view::npos) return invalid("user info is not supported");
  HttpUrl parsed;
  parsed.authority = std::string(authority);
  if (path_start != std::string_view::npos) {
    parsed.target = std::string(rest.substr(path_start));
    if (parsed.target.front() == '?') parsed.target.insert(0, "/");
  }
  // A port follows the last ':' that is outside an IPv6 literal's brackets.
  const size_t close = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    absl::StatusOr<ListenAddress> address = ParseListenAddress(authority);
    if (!address.ok()) {
      const absl::string_view why = address.status().message();
      return invalid(std::string_view(why.data(), why.size()));
    }
    if (address->port == 0) return invalid("port 0");
    parsed.host = address->host;
    parsed.port = address->port;
  } else {
    std::string_view host = authority;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    parsed.host = std::string(host);
  }
  if (parsed.host.empty()) return invalid("missing host");
  return parsed;
}

struct HttpPostClient::Io {
  net::io_context io;
  tcp::resolver resolver{io};
  tcp::socket socket{io};
  net::steady_timer timer{io};
  boost::beast::flat_buffer buffer;
  std::atomic<bool> aborted{false};

  void Close() {
    error_code ignored;
    socket.close(ignored);
    buffer.clear();
  }

  // One request on the open connection, or on a new one when none is open.
  HttpPostOutcome Attempt(const HttpUrl& url, const http::request<http::string_body>& request,
                          std::chrono::steady_clock::time_point deadline) {
    io.restart();
    std::optional<error_code> failure;  // set when the exchange ends
    bool timed_out = false;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxAnswerBodyBytes);
    auto finish = [&](error_code error) {
      failure = error;
      timer.cancel();
    };
    timer.expires_at(deadline);
    timer.async_wait([&](error_code error) {
      if (error || failure.has_value()) return;
      timed_out = true;
      resolver.cancel();
      Close();
    });
    auto exchange = [&] {
      http::async_write(socket, request, [&](error_code error, size_t) {
        if (error) return finish(error);
        http::async_read(socket, buffer, parser,
                         [&](error_code read_error, size_t) { finish(read_error); });
      });
    };
    if (socket.is_open()) {
      exchange();
    } else {
      buffer.clear();
      resolver.async_resolve(url.host, std::to_string(url.port),
                             [&](error_code error, const tcp::resolver::results_type& results) {
                               if (error) return finish(error);
                               net::async_connect(
                                   socket, results,
                                   [&](error_code connect_error, const tcp::endpoint&) {
                                     if (connect_error) return finish(connect_error);
                                     exchange();
                                   });
                             });
    }
    io.run();  // until the exchange and the timer are both done

    HttpPostOutcome outcome;
    if (!failure.has_value() || *failure) {
      Close();
      if (aborted.load(std::memory_order_acquire)) {
        outcome.result = HttpPostOutcome::Result::kUnreachable;
        outcome.detail = "aborted";
      } else if (timed_out) {
        outcome.result = HttpPostOutcome::Result::kTimeout;
        outcome.detail = "no answer in time";
      } else {
        outcome.result = HttpPostOutcome::Result::kUnreachable;
        outcome.detail = failure.has_value() ? failure->message() : "no answer";
      }
      return outcome;
    }
    const http::response<http::string_body>& response = parser.get();
    if (!response.keep_alive() || !socket.is_open()) Close();
    if (response.result_int() < 200 || response.result_int() > 299) {
      outcome.result = HttpPostOutcome::Result::kRejected;
      outcome.detail = absl::StrCat("HTTP ", response.result_int());
    }
    return outcome;
  }
};

HttpPostClient::HttpPostClient(HttpUrl url) : url_(std::move(url)), io_(std::make_unique<Io>()) {}

HttpPostClient::~HttpPostClient() = default;

HttpPostOutcome HttpPostClient::Post(std::string body, std::string_view content_type,
                                     std::chrono::steady_clock::time_point deadline) {
  if (io_->aborted.load(std::memory_order_acquire)) {
    return {HttpPostOutcome::Result::kUnreachable, "aborted"};
  }
  http::request<http::string_body> request(http::verb::post, url_.target, 11);
  request.set(http::field::host, url_.authority);
  request.set(http::field::content_type,
              boost::beast::string_view(content_type.data(), content_type.size()));
  request.keep_alive(true);
  request.body() = std::move(body);
  request.prepare_payload();
  const bool reused = io_->socket.is_open();
  HttpPostOutcome outcome = io_->Attempt(url_, request, deadline);
  if (reused && outcome.result == HttpPostOutcome::Result::kUnreachable &&
      !io_->aborted.load(std::memory_order_acquire) &&
      std::chrono::steady_clock::now() < deadline) {
    outcome = io_->Attempt(url_, request, deadline);  // the server closed the idle connection
  }
  return outcome;
}

void HttpPostClient::Abort() {
  io_->aborted.store(true, std::memory_order_release);
  // Runs on the Posting thread, inside a Post's io.run() (or at the next one).
  net::post(io_->io, [io = io_.get()] {
    io->resolver.cancel();
    io->Close();
    io->timer.cancel();
  });
}

}  // namespace tollgate::server
